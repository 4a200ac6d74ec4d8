"""The rules of validate, each on one model and the repository around it: `check_*` yield the
problems Triton would refuse (a config, version folders, Python files, an ensemble's steps, links,
requirements, golden cases, the version policy), `called` each model a model calls (BLS) with the
problem it is while that model is missing, and `WARNINGS` what is legal but proves less than it
seems. (Running them over a repository, and keeping each model's verdict: models/validate/__init__.py.)"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.models import calls, golden
from triton_release.models.config.backends import backend_problem, model_file, platform_problem
from triton_release.models.config.completion import completes_its_config
from triton_release.models.devices import ENV_PARAMETER
from triton_release.models.repository import (
    GOLDEN_DIR,
    REQUIREMENTS_FILE,
    Model,
    Repository,
    link_problem,
    model_name_problem,
    walk,
)
from triton_release.models.requirements_file import read_requirements
from triton_release.problems import Problem, display_path, line_of

if TYPE_CHECKING:
    from triton_release.models.config.schema import model_config_pb2

LOOKS_LIKE_VERSION = re.compile(r"^(v|version)?-?[0-9]+$", re.I)


Rule = Callable[[Model, Repository], Iterator[Problem]]


def check_name(model: Model, _repo: Repository) -> Iterator[Problem]:
    problem = model_name_problem(model.name)
    if problem:
        yield Problem(model.path, problem)


def check_config(model: Model, _repo: Repository) -> Iterator[Problem]:
    yield from model.problems
    config = model.config
    if config is None:
        return
    text = model.config_text
    if config.name and config.name != model.name:
        yield Problem(
            model.config_path,
            f"name {config.name!r} differs from the model's folder "
            f"{model.name!r}: Triton refuses to load it; make them equal",
            line_of(text, "name"),
        )
    if not config.backend and not config.platform and not model.is_python:  # model.py: Triton takes python
        yield Problem(
            model.config_path, 'neither backend nor platform is set: add backend: "python" (or platform: "ensemble")'
        )
    if config.max_batch_size < 0:
        yield Problem(
            model.config_path, "max_batch_size must be 0 (no batching) or positive", line_of(text, "max_batch_size")
        )
    for kind in ("input", "output"):
        names = Counter(t.name for t in getattr(config, kind))
        for name, count in names.items():
            if count > 1:
                yield Problem(
                    model.config_path, f"{kind} {name!r} is declared {count} times", line_of(text, f'"{name}"')
                )
        for tensor in getattr(config, kind):
            if not tensor.dims and not tensor.HasField("reshape") and config.max_batch_size == 0:
                yield Problem(
                    model.config_path,
                    f"{kind} {tensor.name!r} has no dims: give at least one "
                    "dimension (or max_batch_size > 0 for a batch dimension)",
                    line_of(text, f'"{tensor.name}"'),
                )
            bad = [d for d in tensor.dims if d == 0 or d < -1]
            if bad:
                yield Problem(
                    model.config_path,
                    f"{kind} {tensor.name!r} has dims {list(tensor.dims)}: each "
                    "dimension is positive, or -1 for a variable one",
                    line_of(text, f'"{tensor.name}"'),
                )


def check_backend(model: Model, _repo: Repository, custom: tuple[str, ...] = ()) -> Iterator[Problem]:
    """A backend or platform Triton does not know (a typo: "pyhton", "ensamble") fails at load, after
    a build and a server start; `custom`: the custom_backends setting."""
    config = model.config
    if config is None:
        return
    if config.backend:
        problem = backend_problem(config.backend, custom)
        if problem:
            yield Problem(model.config_path, problem, line_of(model.config_text, "backend"))
    if config.platform:
        problem = platform_problem(config.platform)
        if problem:
            yield Problem(model.config_path, problem, line_of(model.config_text, "platform"))


def check_versions(model: Model, _repo: Repository) -> Iterator[Problem]:
    for name in model.other_dirs:
        if LOOKS_LIKE_VERSION.match(name):
            number = int(re.sub(r"[^0-9]", "", name))
            fix = f"rename it to {number}" if number >= 1 else "version numbers start at 1"
            yield Problem(
                model.path / name,
                f"Triton ignores the folder {name!r}: version folders are "
                f"numbered 1, 2, 3 ... without leading zeros; {fix}",
            )
    for child in sorted(model.path.iterdir()):
        if child.is_file() and LOOKS_LIKE_VERSION.match(child.name):
            yield Problem(child, f"{child.name!r} is a file where a version folder is expected")
    if not model.versions and model.is_ensemble:
        yield Problem(
            model.path,
            "no version folder: Triton needs one even for an ensemble (an empty 1/), and git "
            "keeps no empty folders, so a checkout lacks it; add an empty file "
            f"{display_path(model.path / '1' / '.gitkeep')} and commit it",
        )
    elif not model.versions:
        yield Problem(model.path, f"no version folder: put the model's files in {display_path(model.path / '1')}/")
    for version in model.versions:
        folder = model.path / str(version)
        if not model.is_ensemble and not any(folder.iterdir()):
            yield Problem(folder, "version folder is empty")


def check_python_files(model: Model, _repo: Repository) -> Iterator[Problem]:
    if not model.is_python:
        return
    filename = (model.config.default_model_filename if model.config else "") or "model.py"
    for version in model.versions:
        folder = model.path / str(version)
        if any(folder.iterdir()) and not (folder / filename).is_file():
            what = "a model without config.pbtxt (auto-complete)" if model.auto_complete else "a python model"
            yield Problem(folder, f"no {filename}: {what} needs {display_path(folder / filename)}")
        elif (folder / filename).is_file():
            yield from _syntax(folder / filename)
    if model.auto_complete and model.newest_version is not None:
        yield from _auto_complete(model, model.path / str(model.newest_version) / filename)


def _syntax(path: Path) -> Iterator[Problem]:
    """A model.py that does not compile would fail at load, after a build and a server start."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        yield Problem(
            path,
            f"Python syntax error: {exc.msg}; fix it (tritonserver would fail to load the model)",
            exc.lineno,
            exc.offset,
        )
    except ValueError as exc:  # null bytes
        yield Problem(path, f"not a Python source file ({exc})")


def _auto_complete(model: Model, path: Path) -> Iterator[Problem]:
    """Without config.pbtxt, tritonserver takes the whole config from TritonPythonModel's
    auto_complete_config; a model.py lacking it does not load. Flagged only where the file cannot
    complete its config (models/config/completion.py, the rule the test server follows too): one
    that may get the method elsewhere (a base class, an import, a namespace written) is not, unless
    it names no TritonPythonModel at all (then it loads nothing)."""
    try:
        source = path.read_bytes()
        tree = ast.parse(source)
    except (OSError, SyntaxError, ValueError):
        return  # unreadable or not Python: _syntax says so
    model_class = next(
        (node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "TritonPythonModel"), None
    )
    named = any(
        (isinstance(n, ast.Name) and n.id == "TritonPythonModel")
        or (isinstance(n, ast.alias) and (n.asname or n.name).rsplit(".", 1)[-1] == "TritonPythonModel")
        for n in ast.walk(tree)
    )
    if (model_class is not None or named) and completes_its_config(source):
        return
    yield Problem(
        path,
        f"{model.name} has no config.pbtxt and {path.name} defines no auto_complete_config: "
        "tritonserver cannot load the model without one of them. Add "
        f"{display_path(model.config_path)}, or define auto_complete_config(auto_complete_model_config) "
        "as a @staticmethod of TritonPythonModel",
        model_class.lineno if model_class else None,
    )


def _unknown_sources(
    model: Model, step: model_config_pb2.ModelEnsembling.Step, produced: set[str]
) -> Iterator[Problem]:
    """input_map values naming a tensor that is neither an ensemble input nor any step's output."""
    inputs = set(model.tensors("input"))
    for key, tensor in step.input_map.items():
        if tensor in inputs or tensor in produced:
            continue
        found = re.search(rf'value\s*:\s*"{re.escape(tensor)}"', model.config_text)
        line = (
            model.config_text.count("\n", 0, found.start()) + 1
            if found
            else line_of(model.config_text, f'"{step.model_name}"')
        )
        yield Problem(
            model.config_path,
            f"step {step.model_name!r} maps its input {key!r} from tensor {tensor!r}, "
            "which is neither an ensemble input nor produced by any step's output_map (ensemble inputs: "
            f"{', '.join(sorted(inputs)) or 'none'}; step outputs: {', '.join(sorted(produced)) or 'none'}): "
            "fix the name, or add a step whose output_map produces it",
            line,
        )


def check_ensemble(model: Model, repo: Repository) -> Iterator[Problem]:
    if not model.is_ensemble or model.config is None:
        return
    text = model.config_text
    steps = model.config.ensemble_scheduling.step
    if not steps:
        yield Problem(model.config_path, "an ensemble needs ensemble_scheduling with at least one step")
    produced = {tensor for step in steps for tensor in step.output_map.values()}
    for step in steps:
        line = line_of(text, f'"{step.model_name}"')
        yield from _unknown_sources(model, step, produced)
        if step.model_name not in repo:
            yield Problem(
                model.config_path,
                f"step model {step.model_name!r} is not in the model repository "
                f"(models: {', '.join(sorted(repo.models))})",
                line,
            )
            continue
        target = repo[step.model_name]
        if target.config is None:
            continue
        for kind, mapping in (("input", step.input_map), ("output", step.output_map)):
            declared = target.tensors(kind)
            for key in mapping:
                if key not in declared:
                    yield Problem(
                        model.config_path,
                        f"step {step.model_name!r} maps {kind} {key!r}, which "
                        f"{step.model_name} does not declare (its {kind}s: "
                        f"{', '.join(sorted(declared)) or 'none'})",
                        line_of(text, f'"{key}"') or line,
                    )
    for name in model.tensors("output"):
        if steps and name not in produced:
            yield Problem(
                model.config_path,
                f"ensemble output {name!r} is produced by no step's output_map",
                line_of(text, f'"{name}"'),
            )


def check_links(model: Model, repo: Repository) -> Iterator[Problem]:
    """Links leaving the model repository (the model folder itself, or anything below), pointing to
    nothing, or looping. Links that stay inside are followed, in the image too."""
    problem = link_problem(model.path, repo.root)
    if problem:
        yield Problem(model.path, f"the model folder is itself a link: {problem.message}")
        return
    yield from walk(model.path, repo.root)[1]


def check_requirements(model: Model, _repo: Repository, options: str = "refuse") -> Iterator[Problem]:
    """requirements.txt holds requirements only: pip options, paths and URLs only when allowed. One in
    a version folder is read by nothing: only <model>/requirements.txt is installed."""
    path = model.path / REQUIREMENTS_FILE
    for version in model.versions:
        ignored = model.path / str(version) / REQUIREMENTS_FILE
        if ignored.is_file():
            fix = f"merge its lines into {display_path(path)}" if path.is_file() else f"move it to {display_path(path)}"
            yield Problem(
                ignored,
                f"a requirements.txt inside version folder {version} is ignored: the release "
                f"installs a model's requirements from {model.name}/{REQUIREMENTS_FILE} only; {fix}",
            )
    if path.is_file():
        yield from read_requirements(path, options)[1]
        config = model.config
        if config is not None and ENV_PARAMETER in config.parameters:
            yield Problem(
                model.config_path,
                "sets EXECUTION_ENV_PATH and has a requirements.txt: the release "
                "builds the model's environment from requirements.txt and sets EXECUTION_ENV_PATH "
                "itself. Keep one: remove the parameter, or the requirements.txt",
                line_of(model.config_text, ENV_PARAMETER),
            )


def check_golden(model: Model, _repo: Repository) -> Iterator[Problem]:
    for path in model.golden_cases:
        read = golden.read_case(path, model.name)
        yield from read.problems
        if read.case is not None:  # what could be read is checked too: every problem in one run
            yield from golden.check_against_config(read.case, model, unread=read.unread)


GOLDEN_LIKE = re.compile(r"^golden[-_ ]?(s|cases?|files?|tests?)?$", re.I)  # golden/ itself aside


def _looks_like_case(path: Path) -> bool:
    """A JSON file holding an object with "inputs" or "sequence": a golden case, wherever it is."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and ("inputs" in data or "sequence" in data)


def misplaced_cases(model: Model) -> Iterator[tuple[Path, str]]:
    """Golden cases where no release reads them, each with why: in a version folder's golden/ (shipped
    in the image, never run), in a folder named like golden/ (goldens/, golden_cases/), or beside
    config.pbtxt."""
    for version in model.versions:
        folder = model.path / str(version)
        for child in sorted(folder.iterdir()) if folder.is_dir() else ():
            if child.is_dir() and (child.name == GOLDEN_DIR or GOLDEN_LIKE.match(child.name)):
                for path in sorted(child.glob("*.json")):
                    yield path, "inside a version folder it ships in the image and no release runs it"
    for name in model.other_dirs:
        if name != GOLDEN_DIR and GOLDEN_LIKE.match(name):
            for path in sorted((model.path / name).glob("*.json")):
                yield path, f"a release reads golden cases from {GOLDEN_DIR}/ only, not {name}/"
    for path in sorted(model.path.glob("*.json")):
        if path.is_file() and _looks_like_case(path):
            yield path, f"a release reads golden cases from {GOLDEN_DIR}/ only, not beside {model.config_path.name}"


def check_golden_places(model: Model, _repo: Repository) -> Iterator[Problem]:
    """Golden cases where users put them but no release reads them: where each was found, where it
    belongs, and why."""
    for path, why in misplaced_cases(model):
        target = model.path / GOLDEN_DIR / path.name
        yield Problem(
            path,
            f"a golden case in the wrong place: {why}. Move it to {display_path(target)} "
            f"(git mv {display_path(path)} {display_path(target)})",
        )


def stray_golden_folder(model: Model, repo: Repository) -> Problem | None:
    """`model_repository/golden/` (or goldens/), no model's folder but golden cases gathered in one
    place: read as a model of that name, it would fail as one. None when it is a model."""
    if not (model.name == GOLDEN_DIR or GOLDEN_LIKE.match(model.name)) or model.versions or model.config_text:
        return None
    cases = sorted(model.path.rglob("*.json"))
    if not cases:
        return None
    moves = []
    for path in cases[:3]:
        parts = path.relative_to(model.path).parts
        owner = parts[0] if len(parts) > 1 and parts[0] in repo else "<model>"
        moves.append(f"{display_path(path)} -> {display_path(repo.root / owner / GOLDEN_DIR / path.name)}")
    return Problem(
        model.path,
        f"golden cases in {display_path(model.path)}/, which Triton and the release read as a model called "
        f"{model.name!r}: each model's golden cases belong in its own folder, "
        f"{display_path(repo.root)}/<model>/{GOLDEN_DIR}/<case>.json (Triton ignores non-numeric folders there, "
        f"and they stay out of the image). Move them: {'; '.join(moves)}{' ...' if len(cases) > 3 else ''}",
    )


def check_version_policy(model: Model, _repo: Repository) -> Iterator[Problem]:
    """A version_policy that excludes the newest version folder: the version a release tests and
    serves would never load (the server would wait for it until --load-timeout)."""
    config, newest = model.config, model.newest_version
    if config is None or newest is None or config.version_policy.WhichOneof("policy_choice") != "specific":
        return
    versions = sorted(config.version_policy.specific.versions)
    if newest not in versions:
        yield Problem(
            model.config_path,
            f"version_policy specific {{ versions: {versions} }} excludes version "
            f"{newest}, the newest version folder, which a release tests and serves: tritonserver "
            f"would never load it. Add {newest} to its versions, or use latest {{ num_versions: 1 }}",
            line_of(model.config_text, "version_policy"),
        )


def _model_calls(model: Model) -> tuple[Path, list[calls.Call]]:
    """The newest version folder, and the requests its model file and the modules it imports build."""
    folder = model.path / str(model.newest_version)
    return folder, calls.version_calls(model.path, model.config, model.newest_version) if model.is_python else []


def called(model: Model) -> Iterator[tuple[str, Problem]]:
    """Each model a model calls (BLS), named in its code or declared, with the problem it is when
    that model is not in the repository."""
    folder, found = _model_calls(model)
    for call in found:
        if call.callee is not None:
            yield (
                call.callee,
                Problem(
                    folder / call.file,
                    f"calls model {call.callee!r} (InferenceRequest), which is "
                    "not in the model repository: add it (back), or fix the name",
                    call.line,
                ),
            )
    for name in calls.declared(model.config):
        yield (
            name,
            Problem(
                model.config_path,
                f"{calls.DEPENDS_PARAMETER} names model {name!r}, which is not in "
                "the model repository: add it, or fix the name",
                line_of(model.config_text, calls.DEPENDS_PARAMETER),
            ),
        )


def warn_calls(model: Model, _repo: Repository) -> Iterator[Problem]:
    """A request whose model the code does not tell: re-tested on every change until declared."""
    if calls.declared(model.config):
        return
    folder, found = _model_calls(model)
    for call in found:
        if call.callee is None:
            yield Problem(
                folder / call.file,
                "InferenceRequest's model_name is computed at run time (or the request "
                "is built in a way the release does not read), so the release cannot tell which model this "
                f"calls: until you declare it, {model.name} is re-tested on every change of any other model, "
                "and none of them is loaded for its tests. Declare the models it calls in "
                f'{display_path(model.config_path)}: parameters {{ key: "{calls.DEPENDS_PARAMETER}" value: '
                '{ string_value: "model_a,model_b" } }',
                call.line,
            )


def warn_golden(model: Model, _repo: Repository) -> Iterator[Problem]:
    """Cases that are legal but prove less than their author may think."""
    if not model.golden_cases:
        yield Problem(
            model.path / GOLDEN_DIR,
            "no golden cases: a release can load this model but proves nothing "
            "about its answers; add golden/<case>.json",
        )
    for path in model.golden_cases:
        case, _ = golden.load_case(path, model.name)
        if case is not None:
            yield from golden.case_warnings(case, model)


def warn_model_file(model: Model, _repo: Repository) -> Iterator[Problem]:
    """A model.py beside a config naming another backend: Triton loads that backend's file, and
    model.py is never run."""
    config = model.config
    if config is None or model.is_python or model.is_ensemble or model.newest_version is None:
        return
    folder = model.path / str(model.newest_version)
    if not (folder / "model.py").is_file():
        return
    named = f'backend "{config.backend}"' if config.backend else f'platform "{config.platform}"'
    loaded = model_file(config.backend, config.platform, config.default_model_filename)
    what = display_path(folder / loaded) if loaded else f"the {config.backend or config.platform} backend's model file"
    yield Problem(
        model.config_path,
        f"{display_path(folder / 'model.py')} is a Python model, but {model.name}'s config names {named}: "
        f"Triton loads {what}, not model.py, which is never run. If model.py is the model, write "
        'backend: "python"',
        line_of(model.config_text, "backend" if config.backend else "platform"),
    )


WARNINGS: tuple[Rule, ...] = (warn_golden, warn_calls, warn_model_file)
