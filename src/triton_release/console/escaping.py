"""Text that users and models wrote (file names, a model's error message, a server's log lines),
made safe to show: control characters escaped, so that none colours, moves the cursor or rewrites
a line; in Actions, no line of it a workflow command. Also the escaping GitHub specifies for a
workflow command's own message and properties. Pure functions: the console applies them."""

from __future__ import annotations

import re


def escape_data(text: str) -> str:
    """A workflow command's message, as GitHub specifies: %, CR and LF escaped."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (file=...): also ':' and ','."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


_CONTROLS = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")  # C0 but tab, DEL, C1
_CONTROLS_BUT_LF = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    return _NAMED.get(char) or f"\\x{ord(char):02x}"


def escape_controls(text: str, lines: bool = False) -> str:
    """Text written by a user or a model as a log may show it: each control character (C0 but
    tab, DEL, C1: ESC, CR, backspace, NEL ...) written as Python writes it in a string, `\\x1b`,
    `\\r`, `\\n`, so that none colours, moves the cursor, rewrites a line or starts one. With
    `lines`, line feeds stay (text of several lines that the tool itself wrote)."""
    return (_CONTROLS_BUT_LF if lines else _CONTROLS).sub(_escaped, text)


def defuse_commands(line: str) -> str:
    """One line of user text that the Actions runner would obey as a workflow command, made inert
    and still readable. The runner takes a line as a command when, after leading white space, it
    starts with '::' (`::error::`, `::set-output name=..::`, `::stop-commands::`), or when it holds
    '##[' anywhere (the older syntax): the first ':' of such a line is written `\\x3a`, and every
    '##[' as '#\\x23['. Escaping is stateless, so it holds whatever came before; ::stop-commands::
    would need a token per block and would also silence the tool's own annotations after a crash."""
    line = line.replace("##[", "#\\x23[")
    stripped = line.lstrip()
    if stripped.startswith("::"):
        line = line[: len(line) - len(stripped)] + "\\x3a" + stripped[1:]
    return line
