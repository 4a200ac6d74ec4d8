"""The steps that compose several domains, one function each, returning a typed result; the rest
of a release is domain calls (history/, image/, registry/, evidence/), made directly. The single
commands call the steps one by one; `release` composes them. A step that refuses on its merits
raises with its result attached, so the console can still show what it found.

A step takes what it acts on positionally and every option (each parameter with a default) by
keyword only: `test(root, image, names, *, server_options=..., gates=...)`.

Modules that bring Docker, gRPC or pytest are imported inside the functions that need them (steps
and domains alike), so that `--version`, `validate` and `changed` start without them.

Each module holds a step or two and their results; imports run down:
- `changes`: validate, and changes (the change a release makes, with its version).
- `bump`: bump and undo_bump, journaled (history/journal.py).
- `recover`: what a killed run left, finished.
- `export`: the commit's model repository as it ships, and still_in_place.
- `build`: the environments (image/prepared.py's Prepared) and the release image.
- `golden`: test with its drift and latency gates, signatures, record.
- `commit`: finish_commit and commit_shipped (the release commit itself is history/commit.py).
- `fanout`: plan_commit, plan_shards, the candidate pushed and pulled, write_golden_record.
- `verify`: verify_release.
- `evidence`: finish_evidence, check_evidence.
- `doctor`: doctor, whether a release can run here.
"""

from triton_release.steps.build import build, environments
from triton_release.steps.bump import bump, undo_bump
from triton_release.steps.changes import changes, validate
from triton_release.steps.commit import commit_shipped, finish_commit
from triton_release.steps.doctor import doctor
from triton_release.steps.evidence import check_evidence, finish_evidence
from triton_release.steps.export import export, still_in_place
from triton_release.steps.fanout import plan_commit, plan_shards, write_golden_record
from triton_release.steps.golden import record, signatures, test
from triton_release.steps.recover import recover
from triton_release.steps.verify import verify_release

__all__ = [
    "build",
    "bump",
    "changes",
    "check_evidence",
    "commit_shipped",
    "doctor",
    "environments",
    "export",
    "finish_commit",
    "finish_evidence",
    "plan_commit",
    "plan_shards",
    "recover",
    "record",
    "signatures",
    "still_in_place",
    "test",
    "undo_bump",
    "validate",
    "verify_release",
    "write_golden_record",
]
