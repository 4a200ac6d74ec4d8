"""Version folders: bump N -> N+1 with the head contents, N restored to its released contents."""

from __future__ import annotations

import errno
import filecmp
import hashlib
import os
import re
import shutil
import stat
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.blobs import blob_id
from triton_release.history.changes import ChangeSet, refuse_released_edits
from triton_release.history.git import Git


@dataclass(frozen=True)
class FolderBump:
    """A new version: `to_version` gets the contents `from_version` holds at head, and
    `from_version` gets its released contents back."""

    model: str
    from_version: int
    to_version: int
    new_tree: str = ""  # to_version's contents as a git tree id; "": from_version's at head
    old_tree: str = ""  # from_version's released contents as a git tree id; "": its contents at base

    def folders(self) -> tuple[int, ...]:
        return (self.from_version, self.to_version)

    def to_json(self) -> dict:
        return {"model": self.model, "from": self.from_version, "to": self.to_version}


@dataclass(frozen=True)
class Carried:
    """A released version written from the registry's record (history/released_versions.py): the checkout
    lacks it (`at_head` False), or holds other contents under its number (`at_head`: the working
    folder of a model whose newer release was never committed)."""

    model: str
    version: int
    tree: str  # its contents as released, a git tree id
    release: str = ""  # the release it comes from, REPO:X.Y.Z
    at_head: bool = False

    def folders(self) -> tuple[int, ...]:
        return (self.version,)

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "version": self.version,
            "tree": self.tree,
            "from": self.release,
            "replaces_checkout": self.at_head,
        }


Written = FolderBump | Carried  # what a bump writes into a model repository


@dataclass(frozen=True)
class BumpResult:
    prefix: str
    bumps: tuple[FolderBump, ...]
    undone: bool = False
    carried: tuple[Carried, ...] = ()
    # the working tree held exactly this bump already (a `bump` of the user's, or what an earlier
    # run left): nothing was written, and nothing of it is undone by this run
    found: bool = False
    # every folder the bump wrote with the git tree it wrote there: what the image is built from,
    # proven again before the release commit (history/commit.py)
    trees: tuple[FolderWrite, ...] = ()

    @property
    def written(self) -> bool:
        """Whether this run wrote folders into the working tree, which it undoes on failure."""
        return bool(self.bumps or self.carried) and not self.found and not self.undone

    def to_json(self) -> dict:
        return {
            "bumps": [b.to_json() for b in self.bumps],
            "carried": [c.to_json() for c in self.carried],
            "undone": self.undone,
            "found_in_working_tree": self.found,
        }

    @property
    def folders(self) -> list[str]:
        """Every version folder the bump wrote, as git names them."""
        writes: tuple[Written, ...] = (*self.bumps, *self.carried)
        return [f"{self.prefix}/{b.model}/{v}" for b in writes for v in b.folders()]


@dataclass(frozen=True)
class FolderWrite:
    model: str
    version: int
    tree: str  # the git tree id written there
    at_head: bool  # the folder exists at head: undo restores it, else undo removes it


def folder_writes(git: Git, changes: ChangeSet, items: list[Written]) -> list[FolderWrite]:
    """Every folder the items write, with the git tree of its contents."""

    def path(model: str, version: int) -> str:
        return PurePosixPath(changes.prefix, model, str(version)).as_posix()

    wanted = [
        f"{ref}:{path(b.model, b.from_version)}"
        for b in items
        if isinstance(b, FolderBump)
        for tree, ref in ((b.old_tree, changes.base), (b.new_tree, changes.head))
        if not tree
    ]
    found = dict(zip(wanted, git.text("rev-parse", *wanted).split())) if wanted else {}
    writes = []
    for item in items:
        if isinstance(item, Carried):
            writes.append(FolderWrite(item.model, item.version, item.tree, item.at_head))
            continue
        where = path(item.model, item.from_version)
        writes.append(
            FolderWrite(item.model, item.from_version, item.old_tree or found[f"{changes.base}:{where}"], True)
        )
        writes.append(
            FolderWrite(item.model, item.to_version, item.new_tree or found[f"{changes.head}:{where}"], False)
        )
    return writes


def plan_bumps(changes: ChangeSet, edits: bool = True) -> list[FolderBump]:
    """Which models get a new version folder. Refuses edits to released versions (`edits` False:
    only their removal)."""
    refuse_released_edits(changes, edits)
    bumps = []
    for change in changes.models.values():
        if change.status == "modified" and change.edited_versions and not change.added_versions:
            highest = change.highest_base
            assert highest is not None
            bumps.append(FolderBump(change.name, highest, highest + 1))
    return sorted(bumps, key=lambda b: b.model)


def extract_tree(git: Git, ref: str, strip: str, dest: Path, shown_as: str = "") -> None:
    """Write the files under `strip` at `ref` (a commit or a tree id) into `dest`, as git stores
    them: the committed bytes, whatever the attributes say (`git archive` would drop
    export-ignore files and rewrite export-subst ones), executables 0755, links as links (the
    layers refuse one that leaves the repository). Blobs stream through one `git cat-file`, so a
    large weights file never sits in memory. `shown_as`: the folder `ref` is (a tree id's), named
    where git lacks one of its objects."""
    dest.mkdir(parents=True)
    strip = PurePosixPath(strip).as_posix()  # "./a/1" -> "a/1"; "." is the whole tree
    under = "" if strip == "." else strip + "/"
    listed = git.run("--literal-pathspecs", "ls-tree", "-r", "-z", ref, "--", strip).stdout
    entries = []
    for entry in filter(None, listed.decode("utf-8", "surrogateescape").split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind != "blob":
            continue  # a submodule: git archive too writes no files for it
        relative = path[len(under) :] if path.startswith(under) else path
        parts = PurePosixPath(relative).parts
        if not parts or relative.startswith("/") or ".." in parts:
            raise InfrastructureError(f"git holds a path that leaves its tree at {ref[:12]}: {path!r}")
        entries.append((mode, oid, dest.joinpath(*parts)))
    made = {dest}
    folder = f"{shown_as}/" if shown_as else under
    named = [f"{folder}{target.relative_to(dest).as_posix()}" for _, _, target in entries]
    with git.cat_file([oid for _, oid, _ in entries], named, "" if shown_as else ref) as blobs:
        for (mode, _, target), chunks in zip(entries, blobs):
            if target.parent not in made:
                os.makedirs(target.parent, exist_ok=True)
                made.add(target.parent)
            if mode == "120000":
                os.symlink(b"".join(chunks).decode("utf-8", "surrogateescape"), target)
                continue
            with open(target, "wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
            if mode == "100755":
                os.chmod(target, 0o755)


STAGING = re.compile(r"^\.triton-release-[0-9a-f]{8}$")  # our own staging folders, by name


def _status(git: Git, paths: list[str]) -> list[tuple[str, str]]:
    """(state, path) of every file under `paths` that differs from HEAD: modified, untracked, ignored."""
    out = git.run("status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all", "--", *paths).stdout
    fields = out.decode("utf-8", errors="surrogateescape").split("\0")
    found, i = [], 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            i += 1  # the rename's source path follows
        state = {"??": "not tracked by git", "!!": "ignored by git"}.get(code, "changed and not committed")
        found.append((state, path))
    return found


def changed_paths(git: Git, paths: list[str]) -> list[str]:
    """The files under `paths` that differ from HEAD: modified, untracked or ignored."""
    return [path for _, path in _status(git, paths)]


def check_working_tree(changes: ChangeSet, bumps: list[Written], model_repository: Path) -> None:
    """Bump replaces version folder N of the working tree with what git holds: refuse, before
    touching anything, when the working tree holds anything else there (an ignored weights file,
    an uncommitted edit, a submodule), or when the commit released is not the one checked out."""
    if not bumps:
        return
    git = Git(Git(Path(model_repository)).toplevel())
    if git.text("rev-parse", "HEAD") != changes.head:
        raise Refused(f"""
            The version folders are bumped in the working tree, which holds {
            git.text("rev-parse", "--short", "HEAD")
        }, not the commit released ({changes.head[:12]}). Check that commit out first (git checkout
            {changes.head[:12]}), or release HEAD.""")
    paths = [f"{changes.prefix}/{b.model}/{b.from_version}" for b in bumps if isinstance(b, FolderBump)]
    paths += [f"{changes.prefix}/{b.model}/{b.version}" for b in bumps if isinstance(b, Carried) and b.at_head]
    if not paths:
        return
    tree = git.run("ls-tree", "-r", "-z", changes.head, "--", *paths).stdout.decode(errors="surrogateescape")
    found = [
        ("a git submodule", entry.split("\t", 1)[1])
        for entry in tree.split("\0")
        if entry and entry.split()[1] == "commit"
    ]
    found += _status(git, paths)
    if found:
        listed = "; ".join(f"{path} ({state})" for state, path in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise Refused(f"""
            Bumping would replace {", ".join(paths)} with the committed contents, and the working tree holds
            more there: {listed}{more}. Commit them (large weights: git LFS), or move them out of the
            version folder, then run again. Nothing was changed.""")
    _refuse_unseen(git, changes, paths, tree)


def _refuse_unseen(git: Git, changes: ChangeSet, paths: list[str], tree: str) -> None:
    """What `git status` does not show in the folders the bump replaces, refused before anything
    changes: a folder outside a sparse checkout (nothing there to move); and bytes the bump would
    lose: an edit of a skip-worktree or assume-unchanged file, bytes a clean filter strips before
    git compares them (nbstripout and the like), a `.git` of its own inside a version folder."""
    committed: dict[str, str] = {}  # path -> its blob id at the commit released
    for entry in filter(None, tree.split("\0")):
        meta, path = entry.split("\t", 1)
        _, kind, oid = meta.split()
        if kind == "blob":
            committed[path] = oid
    flags = {}  # path -> git's tag for it: S skip-worktree, a lower-case letter assume-unchanged
    for entry in filter(
        None, git.run("ls-files", "-v", "-z", "--", *paths).stdout.decode(errors="surrogateescape").split("\0")
    ):
        flags[entry[2:]] = entry[0]
    unseen = [p for p, tag in flags.items() if tag == "S" or tag.islower()]
    missing = [p for p in unseen if p in committed and not os.path.lexists(git.cwd / p)]
    sparse = git.run("config", "--bool", "core.sparseCheckout", check=False).stdout.strip() == b"true"
    if missing and sparse:
        parts = PurePosixPath(missing[0]).parts
        model = "/".join(parts[: len(PurePosixPath(changes.prefix).parts) + 1]) if changes.prefix != "." else parts[0]
        raise Refused(f"""
            {PurePosixPath(missing[0]).parent} is outside this sparse checkout (git sparse-checkout): the bump
            moves that version folder to its next number in the working tree, and git holds none of it here.
            Check the model's folder out (`git sparse-checkout add {model}` in a cone-mode sparse checkout, or
            `git sparse-checkout disable`), then run again. Nothing was changed.""")
    found: list[tuple[str, str]] = []
    flag = {p: "skip-worktree" if flags[p] == "S" else "assume-unchanged" for p in unseen}
    for path in missing:
        found.append((path, f"marked {flag[path]} and deleted: `git update-index --no-{flag[path]}` shows it"))
    present = [p for p in unseen if p in committed and p not in missing]
    if present:  # what git would store for each (its filters applied) against the commit
        hashed = git.run(
            "hash-object", "--stdin-paths", input="\n".join(present).encode("utf-8", "surrogateescape") + b"\n"
        )
        for path, oid in zip(present, hashed.stdout.decode().split()):
            if oid != committed[path]:
                found.append(
                    (
                        path,
                        f"marked {flag[path]}: git status hides its edit; `git update-index --no-{flag[path]}` shows it",
                    )
                )
    filtered = _filtered(git, [p for p in committed if p not in unseen and os.path.lexists(git.cwd / p)])
    for path, driver in filtered.items():
        file = git.cwd / path
        if file.is_file() and not file.is_symlink() and blob_id(os.fspath(file), committed[path]) != committed[path]:
            found.append((path, f"its bytes are not the commit's, and its clean filter (filter={driver}) hides that"))
    for folder in paths:
        for directory, folders, files in os.walk(git.cwd / folder):
            for name in (n for n in (*folders, *files) if n == ".git"):
                found.append(
                    (
                        PurePosixPath(os.path.relpath(os.path.join(directory, name), git.cwd)).as_posix(),
                        "a git repository of its own, which git status never shows",
                    )
                )
            folders[:] = [n for n in folders if n != ".git"]
    if found:
        listed = "; ".join(f"{path} ({reason})" for path, reason in found[:5])
        more = f" and {len(found) - 5} more" if len(found) > 5 else ""
        raise Refused(f"""
            Bumping would replace {", ".join(paths)} with the committed contents, and it holds bytes git status does
            not show: {listed}{more}. Move them out of the version folder, or commit the edits git can be shown
            (a filtered file's stripped lines never reach git), then run again. Nothing was changed.""")


def _filtered(git: Git, paths: list[str]) -> dict[str, str]:
    """path -> the filter driver the attributes give it, for each of `paths` with one other than git
    LFS (whose files the bump fills back from its store)."""
    if not paths:
        return {}
    out = git.run(
        "check-attr", "-z", "--stdin", "filter", input="\0".join(paths).encode("utf-8", "surrogateescape") + b"\0"
    ).stdout
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    return {
        fields[i]: fields[i + 2]
        for i in range(0, len(fields) - 2, 3)
        if fields[i + 2] not in ("unspecified", "unset", "set", "lfs")
    }


def apply_bumps(changes: ChangeSet, bumps: list[Written], model_repository: Path, git: Git | None = None) -> None:
    """Write every folder of the bumps: N+1 with the head contents and N restored to its released
    contents, and each carried version as released.

    All-or-nothing: every folder is first staged beside its model, then swapped in by renames;
    a failure (or a signal) undoes the swaps done so far and removes the staging. `git`: the
    repository holding the commits, when `model_repository` is an export outside it.
    """
    root = Path(model_repository)
    git = git or Git(Git(root).toplevel())
    for model in {b.model for b in bumps}:
        for stale in (root / model).glob(".triton-release-*"):
            if STAGING.match(stale.name):  # left by a run that was killed: ours, by name
                shutil.rmtree(stale, ignore_errors=True)
    writes = folder_writes(git, changes, bumps)
    for write in writes:
        if not write.at_head and (root / write.model / str(write.version)).exists():
            raise Refused(f"""
                {changes.prefix}/{write.model}/{write.version} already exists in the working tree but not
                at head: commit it, or remove it, and run again.""")
    moved = _moved_from_checkout(git, writes, root)  # N+1 write -> the write of N it takes
    staging = []
    try:
        for index, write in enumerate(writes):
            stage = root / write.model / f".triton-release-{uuid.uuid4().hex[:8]}"
            staging.append(stage)
            if index not in moved:
                shown_as = PurePosixPath(changes.prefix, write.model, str(write.version)).as_posix()
                extract_tree(git, write.tree, ".", stage / "new", shown_as)
                fill_lfs_pointers(git, stage, required=False)  # the working tree keeps real files where it can
    except OSError as exc:
        for stage in staging:
            shutil.rmtree(stage, ignore_errors=True)
        if exc.errno != errno.ENOSPC:
            raise
        raise InfrastructureError(f"""
            No space left while writing the new version folders under {root} ({exc.strerror}); nothing was
            changed. Free some space and run again.""") from None
    except BaseException:
        for stage in staging:
            shutil.rmtree(stage, ignore_errors=True)
        raise
    done: list[tuple[Path, Path]] = []  # (from, to) renames, for undoing
    try:
        for index, (write, stage) in enumerate(zip(writes, staging)):
            target = root / write.model / str(write.version)
            moves = ((target, stage / "head"),) if write.at_head else ()
            source = staging[moved[index]] / "head" if index in moved else stage / "new"
            for src, dst in (*moves, (source, target)):
                done.append((src, dst))  # before: a signal right after the rename still undoes it
                os.rename(src, dst)
    except BaseException:
        for src, dst in reversed(done):
            if os.path.lexists(dst) and not os.path.lexists(src):  # done (the last one may not be)
                os.rename(dst, src)
        raise
    finally:
        for stage in staging:
            shutil.rmtree(stage, ignore_errors=True)


def _moved_from_checkout(git: Git, writes: list[FolderWrite], root: Path) -> dict[int, int]:
    """The new version folders whose contents are the checkout's folder N itself, which the bump
    moves there rather than writing it again from git (hundreds of MiB of weights: seconds), by
    index in `writes` -> the index of N's write, which moves N aside first. Only where N holds
    exactly what git would write there, told by its bytes (`_same_blobs`: each file's git object
    id and executable bit, no link, empty folder or git LFS pointer), whatever git status, the
    index or the checkout's settings say; and where nothing else can write into N's files (a
    hard link, a process holding one open for writing: `_held_elsewhere`)."""
    pairs = {  # a bump's two writes, N (moved aside first) then N+1
        i: i - 1
        for i, write in enumerate(writes)
        if i and not write.at_head and writes[i - 1].at_head and writes[i - 1].model == write.model
    }
    held = _held_elsewhere([root / writes[n].model / str(writes[n].version) for n in pairs.values()])
    return {
        i: n
        for i, n in pairs.items()
        if (folder := root / writes[n].model / str(writes[n].version)) not in held
        and _same_blobs(git, writes[i].tree, folder)
    }


def _held_elsewhere(folders: list[Path]) -> set[Path]:
    """The folders among `folders` whose files something else can still write to: a file with
    another hard link (st_nlink > 1), or one a process holds open for writing (every process's
    /proc/<pid>/fd, best effort: one this user cannot read is not seen). Moving such a folder to
    N+1 would carry those writes into the released version; it is copied from git instead, and
    the writes land in the old files, which leave the checkout. The release commit proves N+1
    again whatever this misses (history/commit.py)."""
    held: set[Path] = set()
    wanted = {os.path.realpath(folder): folder for folder in folders}
    for real, folder in wanted.items():
        for directory, _, files in os.walk(real):
            if any(os.lstat(os.path.join(directory, name)).st_nlink > 1 for name in files):
                held.add(folder)
                break
    left = {real: folder for real, folder in wanted.items() if folder not in held}
    if not left:
        return held
    for path in _written_by_processes():
        for real, folder in left.items():
            if path.startswith(real + os.sep):
                held.add(folder)
    return held


def _written_by_processes() -> set[str]:
    """The paths of files any process holds open for writing (O_WRONLY or O_RDWR), as
    /proc/<pid>/fd shows them; nothing where there is no /proc or a process cannot be read."""
    found: set[str] = set()
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if not target.startswith("/"):
                    continue  # a pipe, a socket, an anonymous inode
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    flags = next((line.split()[1] for line in info if line.startswith("flags:")), "0")
            except (OSError, ValueError, IndexError):
                continue
            if (int(flags, 8) & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR):
                found.add(target)
    return found


def undo_bumps(changes: ChangeSet, bumps: list[Written], model_repository: Path) -> None:
    """Put the working tree back as it was before `apply_bumps`: every folder it wrote that
    exists at head with the head contents, the others gone."""
    root = Path(model_repository)
    git = Git(Git(root).toplevel())
    for write in folder_writes(git, changes, bumps):
        current = root / write.model / str(write.version)
        if not write.at_head:
            shutil.rmtree(current, ignore_errors=True)
            continue
        path = f"{changes.prefix}/{write.model}/{write.version}"
        stage = root / write.model / f".triton-release-{uuid.uuid4().hex[:8]}"
        try:
            extract_tree(git, changes.head, path, stage / "head")
            fill_lfs_pointers(git, stage / "head", required=False)
            if not current.exists():  # a run killed between its two renames left no folder there
                os.rename(stage / "head", current)
                continue
            os.rename(current, stage / "released")
            try:
                os.rename(stage / "head", current)
            except BaseException:  # a signal between the two renames: the folder goes back as it was
                os.rename(stage / "released", current)
                raise
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def checkout_at(model_repository: Path, revision: str, dest: Path) -> Path | None:
    """The model repository as it was at `revision`, unpacked under `dest`; None when git lacks it
    (or there is no git repository around it)."""
    try:
        git = Git(Git(model_repository).toplevel())
    except UsageError:
        return None
    if not revision or not git.has_commit(revision):
        return None
    prefix = model_repository.resolve().relative_to(git.cwd.resolve()).as_posix()
    target = dest / "model_repository"
    extract_tree(git, revision, prefix, target)
    return target


LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\n"


def lfs_pointer(path: Path | str) -> bytes | None:
    """The text of the git LFS pointer file at `path` (a small file that starts as one), else None."""
    with open(path, "rb") as handle:
        head = handle.read(1025)
    return head if len(head) <= 1024 and head.startswith(LFS_POINTER) else None


def fill_lfs_pointers(git: Git, tree: Path, required: bool = True) -> list[str]:
    """Replace git LFS pointer files under `tree` (an export from git) by their objects from the
    repository's LFS store, each checked against the pointer's sha256: the bytes committed. A
    pointer whose object is not here is refused (`required`), or left as it is. Returns the files
    filled in."""
    store = Path(git.text("rev-parse", "--git-common-dir"))
    store = (store if store.is_absolute() else git.cwd / store) / "lfs" / "objects"
    filled = []
    for path in sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink()):
        head = lfs_pointer(path)
        if head is None:
            continue
        fields = dict(line.split(" ", 1) for line in head.decode("ascii", "replace").splitlines() if " " in line)
        oid = fields.get("oid", "").removeprefix("sha256:")
        valid = re.fullmatch(r"[0-9a-f]{64}", oid) is not None  # never a path of the pointer's choosing
        source = store / oid[:2] / oid[2:4] / oid if valid else None
        if source is None or not source.is_file() or _sha256(source) != oid:
            if not required:
                continue
            raise Refused(f"""
                {path.relative_to(tree)} is a git LFS pointer, and its object ({oid[:12] or "no oid"}) is not in this
                checkout's LFS store: the release would ship the pointer, not the file. Fetch it (git lfs pull; in
                a workflow, actions/checkout with lfs: true), then run again.""")
        shutil.copyfile(source, path)
        filled.append(str(path.relative_to(tree)))
    return filled


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def same_as_tree(git: Git, tree: str, folder: Path) -> bool:
    """Whether `folder` holds exactly the files of git tree `tree` (git LFS objects filled in
    where this clone has them). When every file's bytes are its blob's, their git object ids say
    so, and nothing is written; otherwise (a difference, a link, an LFS pointer) the tree is
    written out beside and compared file by file."""
    if _same_blobs(git, tree, folder):
        return True
    with tempfile.TemporaryDirectory(prefix="triton-release-") as scratch:
        expected = Path(scratch) / "tree"
        extract_tree(git, tree, ".", expected)
        fill_lfs_pointers(git, expected, required=False)
        return folder.is_dir() and _same_tree(expected, folder)


def _same_blobs(git: Git, tree: str, folder: Path) -> bool:
    """True when `folder` holds exactly the regular files of git tree `tree`, each the bytes of
    its blob (its git object id is the blob's) with its executable bit, none a git LFS pointer,
    and no empty folder: what extract_tree writes. False when that is not so or not sure (a
    link, anything but a file)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    expected = {}
    for entry in filter(
        None, git.run("ls-tree", "-r", "-z", tree).stdout.decode("utf-8", "surrogateescape").split("\0")
    ):
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind == "blob":
            if mode == "120000":
                return False
            expected[path] = (oid, mode == "100755")
    found: dict[str, str] = {}
    for directory, folders, files in os.walk(folder):
        if not folders and not files:
            return False  # an empty folder, which git does not write
        for name in folders + files:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode):
                continue
            if not stat.S_ISREG(info.st_mode) or (info.st_size <= 1024 and lfs_pointer(path) is not None):
                return False
            relative = Path(path).relative_to(folder).as_posix()
            if relative in expected and bool(info.st_mode & 0o100) != expected[relative][1]:
                return False  # git writes it with the other mode
            found[relative] = path
    if found.keys() != expected.keys():
        return False
    return all(blob_id(found[p], oid) == oid for p, (oid, _) in sorted(expected.items()))


def holds_bump(changes: ChangeSet, bumps: list[Written], model_repository: Path) -> bool:
    """Whether the working tree holds exactly what these bumps write: N+1 as head's N, N as
    released, each carried version as released (the bump a stopped run left behind, untouched
    since)."""
    root = Path(model_repository)
    git = Git(Git(root).toplevel())
    return all(
        same_as_tree(git, write.tree, root / write.model / str(write.version))
        for write in folder_writes(git, changes, bumps)
    )


def _same_tree(a: Path, b: Path) -> bool:
    """The same files with the same bytes, each a link (to the same target) or a file in both, with
    the same executable bit: what git would record of either."""

    def files(root: Path) -> dict[str, Path]:
        return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file() or p.is_symlink()}

    def same(x: Path, y: Path) -> bool:
        if x.is_symlink() or y.is_symlink():
            return x.is_symlink() and y.is_symlink() and os.readlink(x) == os.readlink(y)
        executable = bool(x.stat().st_mode & 0o100) == bool(y.stat().st_mode & 0o100)
        return executable and filecmp.cmp(x, y, shallow=False)

    left, right = files(a), files(b)
    return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
