"""The released versions the registry keeps: what each release shipped, version by version.

A CI run starts from a fresh checkout, so whatever a release did to the working tree (a bump it
did not commit, or committed and never pushed) is gone by the next run. The release image keeps
what git may have lost: its label `triton-release.versions` names, for every model and version
folder it holds, the git tree id of that folder's contents. A later release reads the last
release's released versions and ships every one of them byte for byte:
- a released version the checkout lacks is written from its tree (it is carried);
- the highest folder in the checkout holds the model's working contents: when they are neither
  that version as released nor the newest released version, they become a new version numbered
  after the highest released one (not after the highest folder git has), and the folder gets
  its released contents back;
- any other folder that holds other contents under a released number is refused.
A tree the clone does not hold (a shallow clone is fetched whole first: history rewritten, a release
made from a commit never pushed) is refused before any build, with how to restore it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from triton_release.errors import Refused
from triton_release.history.bump import Carried, FolderBump, folder_writes
from triton_release.history.changes import ChangeSet, ModelChange
from triton_release.history.git import COMMIT_ID, Git
from triton_release.models.repository import VERSION_DIR, model_name_problem

ReleasedVersions = dict[str, dict[int, str]]


def parse(text: str | None) -> ReleasedVersions | None:
    """The released versions a label's text holds; None for none, or one this version cannot read."""
    try:
        found = json.loads(text or "null")
        if not isinstance(found, dict):
            return None
        return {str(m): {int(v): str(t) for v, t in versions.items()} for m, versions in found.items()}
    except (ValueError, TypeError, AttributeError):
        return None


def label(released_versions: ReleasedVersions) -> str:
    return json.dumps(
        {m: {str(v): t for v, t in sorted(vs.items())} for m, vs in sorted(released_versions.items())},
        sort_keys=True,
        separators=(",", ":"),
    )


_TREES: dict[tuple[str, str, str], ReleasedVersions] = {}  # by repository and commit id: its trees never change


def trees_at(git: Git, ref: str, prefix: str) -> ReleasedVersions:
    """model -> version -> tree id of every numbered version folder of the model repository at `ref`
    (listed once a run for a commit id: a release asks it of its head three times)."""
    key = (os.fspath(git.cwd), ref, prefix)
    if key not in _TREES:
        found = _trees_at(git, ref, prefix)
        if not COMMIT_ID.fullmatch(ref):
            return found
        _TREES[key] = found
    return {model: dict(versions) for model, versions in _TREES[key].items()}


def _trees_at(git: Git, ref: str, prefix: str) -> ReleasedVersions:
    out = git.run("ls-tree", "-r", "-t", "-z", ref, "--", prefix if prefix != "." else ".").stdout
    found: ReleasedVersions = {}
    skip = 0 if prefix == "." else len(PurePosixPath(prefix).parts)
    for entry in out.decode("utf-8", "surrogateescape").split("\0"):
        meta, _, path = entry.partition("\t")
        if " tree " not in meta:
            continue  # a file, or the end (git's paths are plain: no "." or empty parts to read)
        _, kind, oid = meta.split()
        parts = path.split("/")[skip:]
        if kind == "tree" and len(parts) == 2 and VERSION_DIR.match(parts[1]):
            found.setdefault(parts[0], {})[int(parts[1])] = oid
    return found


def shipped(
    git: Git, changes: ChangeSet, head: ReleasedVersions, written: list[FolderBump | Carried]
) -> ReleasedVersions:
    """The released versions of the image a release builds: head's version folders with every write applied."""
    released_versions = {m: dict(vs) for m, vs in head.items()}
    for write in folder_writes(git, changes, written):
        released_versions.setdefault(write.model, {})[write.version] = write.tree
    return released_versions


# A proof reads the history of this many models at most by their own folders; more: the whole model repository's
NARROW_MODELS = 50


def held_trees(
    git: Git, revisions: list[str], prefix: str, models: list[str] | None = None
) -> dict[str, dict[int, set[str]]]:
    """model -> version -> every git tree its version folder held at `revisions` or in their
    history (merges' own resolutions included): what a release made from them can have shipped
    as that version, or (a bump) as a higher one. `models`: only theirs, read from their
    folders' history (every parent of a merge followed)."""
    where = [prefix] if models is None else [f":(literal){PurePosixPath(prefix, m).as_posix()}" for m in models]
    out = git.run(
        "log",
        "--format=",
        "-z",
        "-t",
        "--raw",
        "--no-abbrev",
        "--no-renames",
        "--diff-merges=first-parent",
        *(["--full-history"] if models is not None else []),
        *revisions,
        "--",
        *where,
    ).stdout.decode("utf-8", "surrogateescape")
    skip = 0 if prefix == "." else len(PurePosixPath(prefix).parts)
    held: dict[str, dict[int, set[str]]] = {}
    tokens = iter(out.split("\0"))
    for token in tokens:
        token = token.lstrip("\n")
        if not token.startswith(":"):
            continue
        path = next(tokens, "")
        old_mode, new_mode, old, new = token[1:].split()[:4]
        parts = path.split("/")[skip:]  # git's paths are plain: no "." or empty parts
        if len(parts) == 2 and VERSION_DIR.match(parts[1]):
            found = held.setdefault(parts[0], {}).setdefault(int(parts[1]), set())
            found.update(t for mode, t in ((old_mode, old), (new_mode, new)) if mode == "040000")
    return held


def _held_at_or_below(held: Mapping[int, set[str]], version: int, tree: str) -> bool:
    """Whether `tree` is one that version folder `version` held, or a lower one (which a bump
    copies up to a new number): never a higher version's, which would swap two released versions."""
    return any(tree in trees for number, trees in held.items() if number <= version)


def prove(
    git: Git, released_versions: Mapping[str, Mapping[int, str]], revisions: list[str], prefix: str, what: str
) -> None:
    """Released versions read from the registry (`what`: whose, for the message) are trusted only
    where git proves them: every (model, version, tree) named must be a tree that version's own
    folder held at the commits it was released from (`revisions`) or before them, or a lower
    version's folder of that model (a bump copies N to N+1, committed or not); never another
    model's, nor a higher version's. Released versions rewritten in the registry (a forged label,
    two versions swapped) are refused, naming what differs."""
    if not released_versions:
        return
    found = [r for r in revisions if r and git.has_commit(r)]
    if not found:
        lacking = f"commit {revisions[0][:12]}, which this clone lacks" if any(revisions) else "no commit"
        raise Refused(f"""
            {what} names released versions, but the commit they were released from is {lacking}: it cannot
            be proven against git, and is not trusted. Nothing was built. Check who pushed it; a release
            made by triton-release carries the commit of its build in org.opencontainers.image.revision.""")
    # the trees at the newest commit first (one listing); only the models with others left for their history
    at = {
        model: {version: {tree} for version, tree in trees.items()}
        for model, trees in trees_at(git, found[-1], prefix).items()
    }

    def proven(model: str, version: int, tree: str, held: Mapping[str, Mapping[int, set[str]]]) -> bool:
        return _held_at_or_below(held.get(model, {}), version, tree)

    left = {
        model
        for model, versions in released_versions.items()
        if not all(proven(model, v, t, at) for v, t in versions.items())
    }
    named = sorted(m for m in left if model_name_problem(m) is None)  # no folder has another name: never held
    held = held_trees(git, found, prefix, named if len(left) <= NARROW_MODELS else None) if named else {}
    wrong = [
        (model, version, tree)
        for model, versions in sorted(released_versions.items())
        for version, tree in sorted(versions.items())
        if not proven(model, version, tree, at) and not proven(model, version, tree, held)
    ]
    if wrong:
        listed = "; ".join(f"{prefix}/{m}/{v} as git tree {t[:12]}" for m, v, t in wrong[:5]) + (
            f"; and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        )
        raise Refused(f"""
            {what} says it shipped {listed}, contents that git never held for that version folder (nor a lower
            version's, which a bump copies up) up to {found[-1][:12]}, the commit it was built from: it was
            rewritten after the release (another model's or version's contents put under that number), or not
            written by triton-release from this repository. It is not trusted, and nothing was built. Find
            out who pushed it (the registry's logs), and check the release's evidence with `triton-release
            verify REPO:X.Y.Z --key <your public key>`.""")


def merged(
    image: ReleasedVersions | None, ledger: Mapping[str, Mapping[int, str]], where: str
) -> ReleasedVersions | None:
    """The released versions a release must keep: the last release image's label, and the ledger's
    every version ever released (models removed since, and re-added, included); refused where the
    two disagree (one of them was rewritten)."""
    if image is None and not ledger:
        return None
    out: ReleasedVersions = {m: dict(vs) for m, vs in (image or {}).items()}
    for model, versions in ledger.items():
        for version, tree in versions.items():
            held = out.setdefault(model, {}).setdefault(version, tree)
            if held != tree:
                raise Refused(f"""
                    {where}'s record says {model} version {version} is git tree {held[:12]}, and the registry's
                    ledger says {tree[:12]}: one of them was rewritten after the release. Neither is trusted,
                    and nothing was built. Find out who pushed them (the registry's logs).""")
    return out


@dataclass(frozen=True)
class Reconciled:
    changes: ChangeSet  # with models the released versions show changed and git did not
    bumps: tuple[FolderBump, ...]
    carried: tuple[Carried, ...]


def reconcile(
    git: Git,
    changes: ChangeSet,
    bumps: list[FolderBump],
    released_versions: ReleasedVersions,
    release: str,
    head: ReleasedVersions,
) -> Reconciled:
    """The bumps and carried versions that make the next image ship every version of
    `released_versions` (what the release `release`, REPO:X.Y.Z, shipped) byte for byte, and number
    a new version after the highest released one. `bumps`: what git's history alone would bump;
    `head`: the version folders of the commit released (`trees_at`)."""
    by_git = {b.model: b for b in bumps}
    models = dict(changes.models)
    new_bumps, carried = [], []
    for name in sorted(set(head) | set(by_git)):
        released, held = released_versions.get(name), head.get(name, {})
        if not released or not held:
            if name in by_git:
                new_bumps.append(by_git[name])  # a model the last release did not hold: git decides
            continue
        top, newest = max(held), max(released)
        where = f"{changes.prefix}/{name}"
        for version in sorted(held):
            if version != top and version in released and held[version] != released[version]:
                raise Refused(f"""
                    {where}/{version}: version {version} of {name} was released in {release} with other
                    contents (git tree {released[version][:12]}) than the checkout holds; released versions
                    never change. Put the change in version {top} (it becomes {newest + 1}) and give version
                    {version} back its released contents: `git archive {released[version]} | tar -x -C
                    {where}/{version}` after emptying it. Nothing was changed.""")
        if top in released and held[top] == released[top]:
            pass
        elif held[top] == released[newest]:  # the working folder holds the newest release: never committed
            if top in released:
                carried.append(Carried(name, top, released[top], release, at_head=True))
        elif top not in released:
            if top < newest:
                raise Refused(f"""
                    {where}/{top}: the checkout's newest version of {name} is {top}, which {release} never
                    shipped, and {release} holds versions up to {newest}. Name the new version
                    {newest + 1} (rename the folder), and run again. Nothing was changed.""")
            # a new version folder the change adds itself: kept as it is
        else:
            new_bumps.append(FolderBump(name, top, newest + 1, new_tree=held[top], old_tree=released[top]))
            if name not in models:
                models[name] = ModelChange(
                    name,
                    "modified",
                    edited_versions=(top,),
                    base_versions=tuple(sorted(released)),
                    reasons=(f"version {top} differs from every version {release} shipped",),
                )
        carried += [Carried(name, v, released[v], release) for v in sorted(released) if v not in held]
    _refuse_missing_trees(git, changes.prefix, carried, release)
    return Reconciled(replace(changes, models=models), tuple(new_bumps), tuple(carried))


def _refuse_missing_trees(git: Git, prefix: str, carried: list[Carried], release: str) -> None:
    """Every carried version's tree must be in this clone: refused, before anything is written."""
    if not carried:
        return
    out = git.run("cat-file", "--batch-check", input="".join(f"{c.tree}\n" for c in carried).encode()).stdout
    for item, line in zip(carried, out.decode().splitlines()):
        if line.endswith(" missing") or not line.split()[1:2] == ["tree"]:
            raise Refused(f"""
                {prefix}/{item.model}/{item.version}: version {item.version} of {item.model} was released in
                {release}, and its contents (git tree {item.tree[:12]}) are in neither this clone nor its history:
                the commit that held them never reached origin. Push it from the checkout that released it and
                run again; or, where it is lost, restore the folder from the release image (`docker create
                --name released {release}`, `docker cp released:/models/{item.model}/{item.version}
                {prefix}/{item.model}/{item.version}`, `docker rm released`), commit it, and run again.
                Nothing was built.""")
