"""Which models changed between two commits, how, and which ensembles use them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from triton_release.errors import Refused, UsageError
from triton_release.history.git import COMMIT_ID, Git
from triton_release.models.calls import callees, calls_any, folder_calls, model_file
from triton_release.models.graph import ensemble_needs, users
from triton_release.models.repository import CONFIG_FILE, GOLDEN_DIR, VERSION_DIR, model_name_problem, parse_config_text

if TYPE_CHECKING:
    from triton_release.models.config.schema import model_config_pb2

SETTINGS_FILES = {CONFIG_FILE, "requirements.txt"}


@dataclass(frozen=True)
class ModelChange:
    name: str
    status: str  # added | removed | modified
    files: tuple[str, ...] = ()  # paths relative to the model repository
    edited_versions: tuple[int, ...] = ()  # existing version folders whose files changed
    added_versions: tuple[int, ...] = ()  # version folders new at head
    base_versions: tuple[int, ...] = ()
    reasons: tuple[str, ...] = ()
    removed_versions: tuple[int, ...] = ()  # version folders released at base, gone at head

    @property
    def golden_only(self) -> bool:
        return self.status == "modified" and all(PurePosixPath(f).parts[1] == GOLDEN_DIR for f in self.files)

    @property
    def highest_base(self) -> int | None:
        return max(self.base_versions) if self.base_versions else None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "reasons": list(self.reasons),
            "golden_only": self.golden_only,
            "edited_versions": list(self.edited_versions),
            "added_versions": list(self.added_versions),
            "files": list(self.files),
        }


@dataclass(frozen=True)
class ChangeSet:
    base: str | None  # None: a first release, every model counts as changed
    head: str
    prefix: str = "model_repository"  # the model repository, relative to the git repository
    models: dict[str, ModelChange] = field(default_factory=dict)
    ensembles: tuple[str, ...] = ()  # loaded and tested because a step changed; not bumped
    configs: dict = field(default_factory=dict, repr=False, compare=False)  # (side, model) -> ModelConfig
    callers: tuple[str, ...] = ()  # tested because a model they call (BLS) changed; not bumped

    @property
    def changed(self) -> list[str]:
        return sorted(n for n, c in self.models.items() if c.status != "removed")

    @property
    def added(self) -> list[str]:
        return sorted(n for n, c in self.models.items() if c.status == "added")

    @property
    def removed(self) -> list[str]:
        return sorted(n for n, c in self.models.items() if c.status == "removed")

    @property
    def to_test(self) -> list[str]:
        return sorted(set(self.changed) | set(self.ensembles) | set(self.callers))

    def to_json(self) -> dict:
        return {
            "base": self.base,
            "head": self.head,
            "changed": self.changed,
            "added": self.added,
            "removed": self.removed,
            "ensembles": list(self.ensembles),
            "callers": list(self.callers),
            "to_test": self.to_test,
            "models": {n: c.to_json() for n, c in sorted(self.models.items())},
        }


def _versions(files: list[str]) -> dict[str, set[int]]:
    """model -> its numbered version folders, from paths relative to the model repository."""
    found: dict[str, set[int]] = {}
    for path in files:
        parts = PurePosixPath(path).parts
        if len(parts) < 2:
            continue  # a file at the top of the model repository (README.md, .gitkeep) is no model
        found.setdefault(parts[0], set())
        if len(parts) > 2 and VERSION_DIR.match(parts[1]):
            found[parts[0]].add(int(parts[1]))
    return found


def _check_name(name: str, where: str) -> None:
    problem = model_name_problem(name)
    if problem:
        raise Refused(f"{where}: {problem}.")


def parse_config_blob(blob: bytes | None) -> model_config_pb2.ModelConfig | None:
    return None if blob is None else parse_config_text(blob.decode("utf-8", errors="replace"))


class Changes:
    """Compare the model repository between two commits of the git repository around it."""

    def __init__(self, model_repository: Path) -> None:
        self.root = Path(model_repository).resolve()
        self.git = Git(self.root if self.root.is_dir() else self.root.parent)
        top = self.git.toplevel().resolve()
        if top != self.root and top not in self.root.parents:
            raise UsageError(f"{model_repository} is not inside the git repository at {top}.")
        self.prefix = PurePosixPath(os.path.relpath(self.root, top)).as_posix()
        self.git = Git(top)
        self._listed: dict[str, dict[str, str]] = {}  # by commit id (a commit's files never change): path -> blob id

    def rel(self, path: str) -> str:
        """A path from git (relative to the top) -> relative to the model repository."""
        if self.prefix == ".":
            return path
        if not path.startswith(self.prefix + "/"):  # git names every path below the prefix asked for
            raise ValueError(f"{path!r} is not below {self.prefix!r}")
        return path[len(self.prefix) + 1 :]

    def files(self, ref: str) -> list[str]:
        return [self.rel(p) for p in self._listing(ref)]

    def _listing(self, ref: str) -> dict[str, str]:
        """The model repository's files at `ref` as git names them -> their blob ids."""
        found = self._listed.get(ref)
        if found is None:
            found = self.git.listed(ref, self.prefix + "/" if self.prefix != "." else ".")
            if COMMIT_ID.fullmatch(ref):  # a commit id, not a name that may move
                self._listed[ref] = found
        return found

    def resolve(self, base: str | None, head: str) -> tuple[str | None, str]:
        head_id = self.git.commit(head, "head")
        if head_id is None:
            raise UsageError("head cannot be the all-zero commit: give a commit, branch or tag.")
        base_id = self.git.commit(base, "base") if base else None
        if base_id and not self.git.is_ancestor(base_id, head_id):
            raise UsageError(f"""
                base {base!r} is not an ancestor of head {head!r}: compare a commit with one of its own
                earlier commits (after a force-push, give the last released commit as --base).""")
        return base_id, head_id

    def between(self, base: str | None, head: str = "HEAD") -> ChangeSet:
        base_id, head_id = self.resolve(base, head)
        head_files = self.files(head_id)
        head_versions = _versions(head_files)
        if base_id is None:
            models = {
                name: ModelChange(
                    name, "added", added_versions=tuple(sorted(v)), reasons=("first release: no base commit",)
                )
                for name, v in head_versions.items()
            }
            for name in models:
                _check_name(name, f"{self.prefix}/{name}")
            return self._with_ensembles(ChangeSet(None, head_id, self.prefix, models), head_id, None, head_versions)
        base_versions = _versions(self.files(base_id))
        touched: dict[str, list[str]] = {}
        for _, path in self.git.diff_names(base_id, head_id, self.prefix):
            rel = self.rel(path)
            if len(PurePosixPath(rel).parts) < 2:
                continue  # a file at the top of the model repository belongs to no model
            touched.setdefault(PurePosixPath(rel).parts[0], []).append(rel)
        models = {}
        for name, files in sorted(touched.items()):
            _check_name(name, f"{self.prefix}/{name}")
            models[name] = self._classify(name, sorted(files), base_versions.get(name), head_versions.get(name))
        return self._with_ensembles(ChangeSet(base_id, head_id, self.prefix, models), head_id, base_id, head_versions)

    def _classify(self, name: str, files: list[str], base: set[int] | None, head: set[int] | None) -> ModelChange:
        if base is None:
            return ModelChange(
                name, "added", tuple(files), added_versions=tuple(sorted(head or ())), reasons=("model added",)
            )
        if head is None:
            return ModelChange(
                name, "removed", tuple(files), base_versions=tuple(sorted(base)), reasons=("model removed",)
            )
        edited: set[int] = set()
        added: set[int] = set()
        reasons: list[str] = []
        for path in files:
            parts = PurePosixPath(path).parts
            if len(parts) > 2 and VERSION_DIR.match(parts[1]):
                (edited if int(parts[1]) in base else added).add(int(parts[1]))
        added |= head - base
        removed = base - head
        edited -= added | removed
        kinds = {self._kind(PurePosixPath(f).parts) for f in files}
        if edited:
            reasons.append("files changed in version " + ", ".join(map(str, sorted(edited))))
        if added:
            reasons.append("new version folder " + ", ".join(map(str, sorted(added))))
        if kinds == {"golden"}:
            reasons.append("golden cases only: re-tested, nothing bumped")
        elif kinds <= {"config", "golden"} and not edited and not added:
            names = sorted({PurePosixPath(f).parts[1] for f in files if PurePosixPath(f).parts[1] in SETTINGS_FILES})
            reasons.append(" and ".join(names) + " only: no version folder bumped")
        elif "other" in kinds:
            reasons.append("other model files changed")
        return ModelChange(
            name,
            "modified",
            tuple(files),
            tuple(sorted(edited)),
            tuple(sorted(added)),
            tuple(sorted(base)),
            tuple(reasons),
            tuple(sorted(removed)),
        )

    @staticmethod
    def _kind(parts: tuple[str, ...]) -> str:
        if len(parts) > 2 and VERSION_DIR.match(parts[1]):
            return "version"
        if parts[1] == GOLDEN_DIR:
            return "golden"
        if len(parts) == 2 and parts[1] in SETTINGS_FILES:
            return "config"
        return "other"

    def configs(self, ref: str, names: list[str]) -> dict:
        paths = {n: f"{self.prefix}/{n}/{CONFIG_FILE}" if self.prefix != "." else f"{n}/{CONFIG_FILE}" for n in names}
        blobs = self.git.blobs(ref, list(paths.values()), self._listing(ref))
        return {n: parse_config_blob(blobs[p]) for n, p in paths.items()}

    def _with_ensembles(
        self, changes: ChangeSet, head: str, base: str | None, head_versions: dict[str, set[int]]
    ) -> ChangeSet:
        head_configs = self.configs(head, sorted(head_versions))
        base_names = sorted(set(changes.models) - set(changes.added)) if base else []
        configs = {("head", n): c for n, c in head_configs.items()}
        configs.update({("base", n): c for n, c in self.configs(base, base_names).items()} if base else {})
        steps = ensemble_needs(head_configs)
        calls = self.calls(head, head_configs, head_versions, changes.removed)
        dependents = users(
            changes.changed, {m: steps.get(m, set()) | calls.get(m, set()) for m in set(steps) | set(calls)}
        )
        dependents |= users(changes.removed, calls)  # callers of a removed model: validate refuses named ones
        ensembles = {m for m in dependents if m in steps}
        callers = dependents - ensembles
        return ChangeSet(
            changes.base,
            changes.head,
            changes.prefix,
            changes.models,
            tuple(sorted(ensembles)),
            configs,
            tuple(sorted(callers)),
        )

    def calls(
        self, ref: str, configs: dict, versions: dict[str, set[int]], removed: list[str] | tuple[str, ...] = ()
    ) -> dict[str, set[str]]:
        """model -> the models its newest version calls (BLS: in its model file or the modules of
        its version folder it imports) or its config declares. A model building a request whose
        model its code does not tell, and declaring nothing, calls every other model (`removed`
        included): it is re-tested on any change. Three git commands, however many models."""
        folders = {
            (name, str(max(versions[name]))): model_file(config)
            for name, config in configs.items()
            # no backend nor platform: Triton takes python from model.py, the model file read here
            if versions.get(name)
            and (config is None or config.backend == "python" or not config.backend + config.platform)
        }
        wanted: dict[str, tuple[str, str]] = {}  # path in git -> (model, path inside its version folder)
        for path in self.files(ref):
            parts = path.split("/", 2)
            if (
                len(parts) == 3
                and (parts[0], parts[1]) in folders
                and (parts[2].endswith(".py") or parts[2] == folders[parts[0], parts[1]])
            ):
                wanted[path if self.prefix == "." else f"{self.prefix}/{path}"] = (parts[0], parts[2])
        blobs = self.git.blobs(ref, list(wanted), self._listing(ref))
        sources: dict[str, dict[str, bytes]] = {}
        for path, (name, inside) in wanted.items():
            blob = blobs.get(path)
            if blob is not None:
                sources.setdefault(name, {})[inside] = blob
        every = set(configs) | set(removed)
        found = {}
        for name, config in configs.items():
            made = folder_calls(model_file(config), sources.get(name, {}))
            called = (every if calls_any(config, made) else callees(config, made)) - {name}
            if called:
                found[name] = called
        return found


def refuse_released_edits(changes: ChangeSet, edits: bool = True) -> None:
    """Released versions are immutable: only the highest may change (and then it is bumped), and
    none may be removed while the model stays. `edits` False: removals only (the registry's record
    judges edits, history/released_versions.py)."""
    for change in changes.models.values():
        if change.removed_versions:
            version = change.removed_versions[-1]
            path = f"{changes.prefix}/{change.name}/{version}"
            assert changes.base is not None
            raise Refused(f"""
                {path}: version {version} of {change.name} was released and is removed at head; released
                versions stay (they are rolled back to). Restore it with `git checkout {changes.base[:12]} --
                {path}`, or remove the whole model.""")
        if not edits or change.status != "modified" or not change.edited_versions:
            continue
        highest = change.highest_base
        frozen = [v for v in change.edited_versions if v != highest or change.added_versions]
        if not frozen:
            continue
        version = frozen[0]
        path = next(f for f in change.files if PurePosixPath(f).parts[1] == str(version))
        if change.added_versions:
            hint = f"you already add version {', '.join(map(str, change.added_versions))}: put the change there"
        else:
            assert highest is not None
            hint = f"put the change in version {highest} (it becomes {highest + 1})"
        assert changes.base is not None
        raise Refused(f"""
            {changes.prefix}/{path}: version {version} of {change.name} is a released version and cannot change; {hint},
            and restore the file with `git checkout {changes.base[:12]} -- {changes.prefix}/{path}`.""")
