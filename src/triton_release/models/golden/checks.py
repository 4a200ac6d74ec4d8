"""A loaded golden case against its model's config.pbtxt: the case's form (a sequence or one
request) against the model's batching, each tensor's name, data type and shape against what the
config declares; and the warnings for what is legal in a case but proves less than it seems."""

from __future__ import annotations

import difflib
import json

from triton_release.models.config.schema import model_config_pb2
from triton_release.models.golden.format import GoldenCase, Step
from triton_release.models.golden.reader import line_in
from triton_release.models.repository import Model, datatype_name
from triton_release.problems import Problem, line_of


def shape_fits(shape: tuple[int, ...], dims: list[int], max_batch_size: int) -> bool:
    if max_batch_size > 0:
        if not shape or not 1 <= shape[0] <= max_batch_size:
            return False
        shape = shape[1:]
    return len(shape) == len(dims) and all(d == -1 or d == s for s, d in zip(shape, dims))


def sequence_model(model: Model) -> bool:
    """The model's config has sequence_batching, not iterative: each request needs a correlation id."""
    return (
        model.config is not None
        and model.config.HasField("sequence_batching")
        and not model.config.sequence_batching.iterative_sequence
    )


def iterative_model(model: Model) -> bool:
    """`sequence_batching { iterative_sequence: true }`: each request is a sequence of its own, which
    the model reschedules until it is done. NVIDIA's own tests (qa/L0_backend_python/
    request_rescheduling) send such a model plain requests without a correlation id; so do its cases."""
    return (
        model.config is not None
        and model.config.HasField("sequence_batching")
        and model.config.sequence_batching.iterative_sequence
    )


def check_against_config(case: GoldenCase, model: Model, unread: frozenset[str] = frozenset()) -> list[Problem]:
    """The case's form (a sequence or one request) against the model's batching, and the names,
    data types and shapes of every step against the tensors the config declares."""
    if model.config is None or (model.completes_config and not model.declares_tensors):
        # a config auto_complete_config completes (none, or one declaring no tensor): its tensors are
        # known only once the server has loaded the model, as the image serves it
        return []
    text = case.path.read_text(encoding="utf-8", errors="replace")
    problems = []
    if sequence_model(model) and case.sequence is None:
        problems.append(
            Problem(
                case.path,
                f"{model.name}/config.pbtxt has sequence_batching: every request "
                "needs a correlation id and START/END flags, which only a sequence case sends; "
                'write it as {"sequence": [{"inputs": [...], "outputs": [...]}, ...]} '
                "(one step is a sequence too)",
                line_of(text, '"inputs"'),
            )
        )
    if case.sequence is not None and iterative_model(model):
        problems.append(
            Problem(
                case.path,
                f"a sequence case, but {model.name}/config.pbtxt has sequence_batching "
                "with iterative_sequence: true, whose every request is a sequence of its own that "
                "the model reschedules until it is done (no correlation id, no START/END). Write "
                'each request as a case of its own with "inputs" and "outputs" (a decoupled '
                "model's responses as a list of responses)",
                line_of(text, '"sequence"'),
            )
        )
    elif case.sequence is not None and not sequence_model(model):
        problems.append(
            Problem(
                case.path,
                f"a sequence case, but {model.name}/config.pbtxt has no "
                "sequence_batching: add it to the config, or write each request as a case of "
                'its own with "inputs" and "outputs"',
                line_of(text, '"sequence"'),
            )
        )
    mbs = model.config.max_batch_size
    for index, step in enumerate(case.steps):
        prefix = f"sequence step {index + 1}: " if case.sequence is not None else ""
        problems.extend(_transaction_policy(case, model, step, prefix, text))
        suggested = set(unread)  # given but unreadable, or offered as the fix of a misspelt name: not "lacking"
        for kind, tensors in (("input", step.inputs), ("output", step.expected)):
            declared = model.tensors(kind)
            for tensor in tensors:
                line = line_in(text, json.dumps(tensor.name), step.span)
                spec = declared.get(tensor.name)
                if spec is None:
                    names = ", ".join(sorted(declared)) or "none"
                    close = difflib.get_close_matches(tensor.name, sorted(declared), n=1)
                    fix = f"did you mean {close[0]!r}? " if close else ""
                    if kind == "input":
                        suggested.update(close)
                    problems.append(
                        Problem(
                            case.path,
                            f"{prefix}{kind} {tensor.name!r} is not declared in "
                            f"{model.name}/config.pbtxt (its {kind}s: {names}): {fix}use a name the config "
                            f"declares, or declare the {kind} there",
                            line,
                        )
                    )
                    continue
                want = datatype_name(spec.data_type)
                if tensor.datatype != want:
                    problems.append(
                        Problem(
                            case.path,
                            f"{prefix}{kind} {tensor.name!r} is {tensor.datatype} here but {want} in config.pbtxt "
                            f'({_config_type(spec.data_type)}): write its "datatype" as "{want}"',
                            line,
                        )
                    )
                if not shape_fits(tensor.shape, list(spec.dims), mbs):
                    batch = f"[batch 1..{mbs}] + " if mbs > 0 else ""
                    problems.append(
                        Problem(
                            case.path,
                            f"{prefix}{kind} {tensor.name!r} has shape "
                            f"{list(tensor.shape)}, which does not fit {batch}dims "
                            f"{list(spec.dims)} of config.pbtxt: give it a shape such as "
                            f"{example_shape(list(spec.dims), mbs)} (-1 in dims stands for any size)",
                            line,
                        )
                    )
        problems.extend(_missing_inputs(case, model, step, prefix, text, suggested))
    return problems


def _transaction_policy(case: GoldenCase, model: Model, step: Step, prefix: str, text: str) -> list[Problem]:
    """A step's "outputs" against the model's transaction policy: a decoupled model answers with a
    stream of responses (a list of responses, each a list of tensors), any other with exactly one
    (a list of tensors)."""
    line = line_in(text, '"outputs"', step.span)
    config = f"{model.name}/config.pbtxt"
    if model.decoupled and step.responses is None and step.outputs:
        return [
            Problem(
                case.path,
                f'{prefix}"outputs" is a list of tensors, but {config} has model_transaction_policy '
                '{ decoupled: true }: the model answers with a stream of responses, so write "outputs" as a '
                'list of responses, each a list of tensors ([[{"name": ...}]] for one response, [] for none); '
                "a list of tensors would compare the first response only, not how many came",
                line,
            )
        ]
    if not model.decoupled and step.responses is not None:
        return [
            Problem(
                case.path,
                f'{prefix}"outputs" is a list of responses, but {config} is not decoupled (no '
                "model_transaction_policy { decoupled: true }): the model answers each request with exactly "
                'one response, so write "outputs" as the list of its tensors [{"name": ...}]; or make the '
                "model decoupled in its config if it streams",
                line,
            )
        ]
    return []


def example_shape(dims: list[int], max_batch_size: int) -> list[int]:
    """A request shape that fits `dims`: a batch of one first where the model batches, 1 for -1."""
    return [1] * (max_batch_size > 0) + [1 if d == -1 else d for d in dims]


def _config_type(data_type: int) -> str:
    return model_config_pb2.DataType.Name(data_type)


def _missing_inputs(
    case: GoldenCase, model: Model, step: Step, prefix: str, text: str, suggested: set[str]
) -> list[Problem]:
    """The inputs config.pbtxt declares, not `optional: true`, that a request leaves out: the
    server refuses such a request, so the case could never pass. A step that expects an error may
    leave one out on purpose (to prove the refusal)."""
    if step.error is not None:
        return []
    given = {tensor.name for tensor in step.inputs} | suggested
    missing = [spec for spec in model.config.input if not spec.optional and spec.name not in given]  # type: ignore[union-attr]
    if not missing:
        return []
    mbs = model.config.max_batch_size  # type: ignore[union-attr]
    names = ", ".join(repr(spec.name) for spec in missing)
    example = missing[0]
    tensor = json.dumps(
        {
            "name": example.name,
            "datatype": datatype_name(example.data_type),
            "shape": example_shape(list(example.dims), mbs),
            "data": ["..."],
        }
    ).replace('["..."]', "[...]")
    return [
        Problem(
            case.path,
            f'{prefix}"inputs" lacks {names}, which {model.name}/config.pbtxt declares and does not mark '
            "`optional: true`: the server refuses a request without "
            f"{'them' if len(missing) > 1 else 'it'}, so the case cannot pass. Add "
            f'{"each" if len(missing) > 1 else "it"} to "inputs" (e.g. {tensor}), or mark '
            f"{'them' if len(missing) > 1 else 'it'} `optional: true` in config.pbtxt if the model does without",
            line_in(text, '"inputs"', step.span),
        )
    ]


# -- warnings -----------------------------------------------------------------------------------


def case_warnings(case: GoldenCase, model: Model) -> list[Problem]:
    """What is legal in a case but proves less than its author may think."""
    warnings = []
    text = case.path.read_text(encoding="utf-8", errors="replace")
    record = f"`triton-release record --image IMAGE --models {model.name}`"
    silent = [
        (i, s)
        for i, s in enumerate(case.steps, 1)
        if not s.expected and not s.responses and s.error is None and not s.no_responses(model.decoupled)
    ]
    if silent:
        outputs = ", ".join(sorted(model.tensors("output"))) or "its outputs"
        warnings.append(
            Problem(
                case.path,
                f'{_which(case, silent)}no "outputs": the case proves only that the '
                f"model answers, not what it answers; list {outputs} with their expected data, or "
                f"fill them in with {record}",
                line_in(text, '"outputs"', silent[0][1].span),
            )
        )
    vague = [(i, s) for i, s in enumerate(case.steps, 1) if s.error is not None and s.error.any]
    if vague:
        warnings.append(
            Problem(
                case.path,
                f'{_which(case, vague)}"error": true passes on any error, so it proves '
                "only that the model refuses, not why; write part of the expected message instead, "
                f"or fill it in with {record}",
                line_in(text, '"error"', vague[0][1].span),
            )
        )
    return warnings


def _which(case: GoldenCase, steps: list[tuple[int, Step]]) -> str:
    """ "sequence steps 1, 3: " for a sequence case; nothing for a case of one request."""
    if case.sequence is None:
        return ""
    return f"sequence step{'s' if len(steps) > 1 else ''} {', '.join(str(i) for i, _ in steps)}: "
