"""The journal of a bump in progress: what a run is about to write into the working tree, kept
under `.git/` until that run undoes the bump or ends with it, so that a run killed on the way
(SIGKILL, a runner that dies, a registry that vanishes mid-push) is recognised and finished by the
next run, which no cleanup code of the dead one could do.

Its phase says how far the dead run got:
- `bumped`: nothing was pushed: the next run undoes the bump;
- `pushing`: X.Y.Z may be in the registry: the next run asks it, then keeps or undoes the bump;
- `committing`: published, the release commit under way: the next run clears git's stale lock and
  makes the commit's tag, or leaves the bump for the commit to be made.
A journal that cannot be read (cut short, another shape) is dropped; the next run then knows the
bump it may describe by its contents (steps/bump.py's `bump`: the folders hold exactly what
the bump writes) and undoes it as its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from triton_release.errors import TritonReleaseError
from triton_release.files import write_atomic
from triton_release.history.bump import Carried, FolderWrite
from triton_release.history.git import Git
from triton_release.processes import owner

FILE = "triton-release/bump.json"


@dataclass(frozen=True)
class Entry:
    """A journal as read back."""

    phase: str
    head: str
    prefix: str
    writes: tuple[FolderWrite, ...]
    owner: dict
    release: str = ""  # REPO, when the run was to push
    version: str = ""  # the X.Y.Z it was pushing

    def carried(self) -> list[Carried]:
        """The writes as items the bump functions undo (history/bump.py)."""
        return [Carried(w.model, w.version, w.tree, at_head=w.at_head) for w in self.writes]


class Journal:
    def __init__(self, git: Git) -> None:
        own = Path(git.text("rev-parse", "--git-dir"))  # this worktree's: each has its own bump
        self.path = (own if own.is_absolute() else git.cwd / own) / FILE
        self.dropped = False  # the last read found a journal it could not read, and removed it

    @classmethod
    def around(cls, root: Path) -> Journal:
        """The journal of the git repository around the model repository `root`."""
        return cls(Git(Git(root).toplevel()))

    @classmethod
    def left_in(cls, root: Path) -> bool:
        """Whether a run left its journal in the git repository around `root`."""
        try:
            return cls.around(root).path.exists()
        except TritonReleaseError:
            return False

    def begin(self, head: str, prefix: str, writes: list[FolderWrite], release: str = "") -> None:
        self._write(
            {
                "phase": "bumped",
                "head": head,
                "prefix": prefix,
                "release": release,
                "version": "",
                "writes": [[w.model, w.version, w.tree, w.at_head] for w in writes],
                "owner": owner(),
            }
        )

    def phase(self, phase: str, version: str = "") -> None:
        data = self._read_raw()
        if data is None:
            return
        data.update({"phase": phase, **({"version": version} if version else {})})
        self._write(data)

    def end(self) -> None:
        self.path.unlink(missing_ok=True)

    def read(self) -> Entry | None:
        """The journal; None for none, and one cut short or of another shape is dropped (it is
        ours to write): `dropped` tells the caller so."""
        self.dropped = False
        data = self._read_raw()
        if data is None:
            if self.path.exists():
                self.dropped = True
                self.end()
            return None
        try:
            writes = tuple(FolderWrite(str(m), int(v), str(t), bool(h)) for m, v, t, h in data["writes"])
            return Entry(
                str(data["phase"]),
                str(data["head"]),
                str(data["prefix"]),
                writes,
                dict(data["owner"]),
                str(data.get("release") or ""),
                str(data.get("version") or ""),
            )
        except (KeyError, TypeError, ValueError):
            self.dropped = True
            self.end()
            return None

    def _read_raw(self) -> dict | None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _write(self, data: dict) -> None:
        write_atomic(self.path, json.dumps(data, sort_keys=True))


@dataclass(frozen=True)
class Recovered:
    """What a run found of an earlier one that was killed with its bump in the working tree."""

    phase: str
    action: str  # undone | kept | tagged | gone | dropped (unreadable: its bump is known by content)
    folders: tuple[str, ...]
    owner: str

    def to_json(self) -> dict:
        return {"phase": self.phase, "action": self.action, "folders": list(self.folders), "owner": self.owner}
