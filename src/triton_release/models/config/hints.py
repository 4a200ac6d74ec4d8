"""The hint a config.pbtxt parse error adds when it names an enum value that Triton's schema lacks
(`enum_hint`): the value meant, from the common spellings of Triton's data types (FLOAT, float32,
BYTES ...) or the closest of the enum's own names."""

from __future__ import annotations

import difflib
import re

from triton_release.models.config.schema import model_config_pb2

# common spellings of Triton's data types, by the name without TYPE_ (KServe's and numpy's among them)
DATA_TYPE_SPELLINGS = {
    "FLOAT": "FP32",
    "FLOAT32": "FP32",
    "F32": "FP32",
    "SINGLE": "FP32",
    "FLOAT16": "FP16",
    "HALF": "FP16",
    "F16": "FP16",
    "FLOAT64": "FP64",
    "DOUBLE": "FP64",
    "F64": "FP64",
    "BFLOAT16": "BF16",
    "BFLOAT": "BF16",
    "INT": "INT32",
    "LONG": "INT64",
    "UINT": "UINT32",
    "BYTE": "UINT8",
    "CHAR": "INT8",
    "SHORT": "INT16",
    "BOOLEAN": "BOOL",
    "STRING": "STRING",
    "STR": "STRING",
    "BYTES": "STRING",
    "TEXT": "STRING",
    "OBJECT": "STRING",
}
_UNKNOWN_ENUM = re.compile(r'^Enum type "([\w.]+)" has no value named ("?)([^".\s]+)')


def enum_hint(message: str) -> str:
    """'; did you mean TYPE_FP32?' for an unknown enum value in a parse error, or ''."""
    match = _UNKNOWN_ENUM.match(message)
    if match is None:
        return ""
    try:
        enum = model_config_pb2.DESCRIPTOR.pool.FindEnumTypeByName(match.group(1))
    except KeyError:
        return ""
    names = [name for name in enum.values_by_name if not name.endswith("_INVALID")]
    given = match.group(3).upper()
    if match.group(1) == "inference.DataType":
        bare = given.removeprefix("TYPE_").removeprefix("TYPE")
        spelled = "TYPE_" + DATA_TYPE_SPELLINGS.get(bare, bare)
        given = spelled if spelled in names else given
    if given in names:
        return f"; write it without quotes: {given}" if match.group(2) else f"; did you mean {given}?"
    close = difflib.get_close_matches(given, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else f"; the values are {', '.join(names)}"


_UNKNOWN_FIELD = re.compile(r'^Message type "([\w.]+)" has no field named "(\w+)"')


def field_hint(message: str) -> str:
    """'; did you mean max_batch_size?' for an unknown field in a parse error, or ''."""
    match = _UNKNOWN_FIELD.match(message)
    if match is None:
        return ""
    try:
        fields = model_config_pb2.DESCRIPTOR.pool.FindMessageTypeByName(match.group(1)).fields_by_name
    except KeyError:
        return ""
    close = difflib.get_close_matches(match.group(2), list(fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
