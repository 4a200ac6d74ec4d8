"""Static checks of a model repository: what Triton would refuse, found before any build.

Every rule sees one model and the repository around it and yields problems; all problems are
reported, not just the first. The rules: models/validate/rules.py. This module runs them over the
repository and keeps each model folder's verdict between runs, by the folder's fingerprint.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from triton_release.cache import Memo
from triton_release.models.repository import Model, Repository, fingerprint
from triton_release.models.validate.rules import (
    WARNINGS,
    called,
    check_backend,
    check_config,
    check_ensemble,
    check_golden,
    check_golden_places,
    check_links,
    check_name,
    check_python_files,
    check_requirements,
    check_version_policy,
    check_versions,
    stray_golden_folder,
)
from triton_release.problems import Problem, display_path


@dataclass(frozen=True)
class ValidationResult:
    root: str
    models: tuple[str, ...]
    golden_cases: int
    problems: tuple[Problem, ...]
    warnings: tuple[Problem, ...]
    failing: tuple[str, ...] = ()  # the models with problems

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """The closing line of a refusal: how many problems in how many models, listed above."""
        count, failing = len(self.problems), len(self.failing)
        return (
            f"{self.root}: {count} problem{'s' if count != 1 else ''} found in {failing} of "
            f"{len(self.models)} model{'s' if len(self.models) != 1 else ''} (listed above as file:line:col). "
            f"Fix {'them' if count != 1 else 'it'} and run `triton-release validate` again."
        )

    def to_json(self) -> dict:
        return {
            "model_repository": self.root,
            "ok": self.ok,
            "models": list(self.models),
            "golden_cases": self.golden_cases,
            "problems": [p.to_json() for p in self.problems],
            "warnings": [w.to_json() for w in self.warnings],
        }


def _rules_version() -> str:
    """The checks' own source (this package's modules, the golden-case and config rules they call, the
    model repository's reading and the problems module), the tool's and Python's versions and the
    config schema's library: a verdict kept by other checks is not reused."""
    from importlib import metadata

    from triton_release import __version__, problems
    from triton_release.models import config as config_rules
    from triton_release.models import golden as golden_rules
    from triton_release.models import repository

    digest = hashlib.sha256(f"{__version__} {sys.version}".encode())
    for name in ("protobuf", "packaging"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            digest.update(f" {name} {metadata.version(name)}".encode())
    sources = [
        *Path(__file__).parent.glob("*.py"),
        *Path(golden_rules.__file__).parent.glob("*.py"),
        *Path(config_rules.__file__).parent.glob("*.py"),
        Path(repository.__file__),
        Path(problems.__file__),
    ]
    for path in sorted(sources):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_VERDICTS: Memo | None = None  # a model folder's fingerprint -> its verdict; made when first needed


def verdicts() -> Memo:
    global _VERDICTS
    if _VERDICTS is None:
        _VERDICTS = Memo("model-verdict", _rules_version())
    return _VERDICTS


Found = tuple[str | None, Problem]  # a problem, with the model whose absence makes it one (None: it stands alone)


@dataclass(frozen=True)
class Verdict:
    """What the checks found in one model folder, in order. A call's problem names the model
    called: it stands only while that model is missing from the repository."""

    problems: tuple[Found, ...]
    warnings: tuple[Problem, ...]
    golden_cases: int

    def in_repository(self, repo: Repository) -> tuple[Problem, ...]:
        return tuple(problem for needed, problem in self.problems if needed is None or needed not in repo)

    def to_json(self) -> dict:
        return {
            "problems": [[needed, _problem_json(p)] for needed, p in self.problems],
            "warnings": [_problem_json(p) for p in self.warnings],
            "golden_cases": self.golden_cases,
        }

    @classmethod
    def from_json(cls, data: object) -> Verdict:
        """A verdict kept in the memo; TypeError or ValueError when it has another shape (the memo
        discards it)."""
        if not isinstance(data, dict) or not isinstance(data.get("golden_cases"), int):
            raise TypeError("not a verdict")
        problems = tuple((_named(needed), _problem(p)) for needed, p in data["problems"])
        return cls(problems, tuple(_problem(p) for p in data["warnings"]), data["golden_cases"])


def _named(needed: object) -> str | None:
    if needed is not None and not isinstance(needed, str):
        raise TypeError("not a model name")
    return needed


def _problem_json(problem: Problem) -> list:
    return [os.fspath(problem.path), problem.message, problem.line, problem.col]


def _problem(data: object) -> Problem:
    if (
        not isinstance(data, list)
        or len(data) != 4
        or not all(isinstance(d, str) for d in data[:2])
        or not all(d is None or type(d) is int for d in data[2:])
    ):
        raise TypeError("not a problem")
    return Problem(Path(data[0]), data[1], data[2], data[3])


def judge(model: Model, repo: Repository, requirements_options: str, custom_backends: tuple[str, ...] = ()) -> Verdict:
    """Every check of one model. Links that leave the repository, dangle or loop are its only
    problems when there are any: nothing behind them is read. `custom_backends`: the setting."""
    links = tuple((None, problem) for problem in check_links(model, repo))
    if links:
        return Verdict(links, (), 0)
    stray = stray_golden_folder(model, repo)
    if stray is not None:
        return Verdict(((None, stray),), (), 0)
    found: list[Found] = []
    for rule in (
        check_name,
        check_config,
        partial(check_backend, custom=custom_backends),
        check_versions,
        check_python_files,
        check_ensemble,
    ):
        found.extend((None, problem) for problem in rule(model, repo))
    found.extend(called(model))
    for rule in (
        check_version_policy,
        check_golden,
        check_golden_places,
        partial(check_requirements, options=requirements_options),
    ):
        found.extend((None, problem) for problem in rule(model, repo))
    warnings = tuple(warning for rule in WARNINGS for warning in rule(model, repo))
    return Verdict(tuple(found), warnings, len(model.golden_cases))


def verdict(repo: Repository, name: str, requirements_options: str, custom_backends: tuple[str, ...] = ()) -> Verdict:
    """One model's verdict, kept between runs by its folder's fingerprint: a repository of a
    thousand models reads only the folders that changed. An ensemble is always checked anew: its
    problems depend on its steps' configs."""
    key = fingerprint(repo.root / name)
    # problems name the path as given, some shown relative to the working directory
    memo_key = f"{key} {requirements_options} {','.join(custom_backends)} {os.fspath(repo.root / name)} {os.getcwd()}"
    known = verdicts().get(memo_key, Verdict.from_json) if key is not None else None
    if known is not None:
        return known
    model = repo[name]
    found = judge(model, repo, requirements_options, custom_backends)
    if key is not None and not model.is_ensemble:
        verdicts().put(memo_key, found.to_json())
    return found


def validate(
    root: Path, requirements_options: str = "refuse", custom_backends: tuple[str, ...] = ()
) -> ValidationResult:
    """`requirements_options`: the setting of that name, "refuse" or "allow"; `custom_backends`: the
    backends besides Triton's that the base image holds."""
    repo = Repository.load(root, lazy=True)
    problems: list[Problem] = []
    warnings: list[Problem] = []
    cases = 0
    failing: list[str] = []
    for name in repo.models:
        found = verdict(repo, name, requirements_options, custom_backends)
        standing = found.in_repository(repo)
        problems.extend(standing)
        failing.extend([name] if standing else [])
        warnings.extend(found.warnings)
        cases += found.golden_cases
    return ValidationResult(
        display_path(Path(root)), tuple(repo.models), cases, tuple(problems), tuple(warnings), tuple(failing)
    )
