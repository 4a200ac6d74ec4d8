"""The revision a benchmark measured: the full commit of a clean tree, or a refusal.

Figures are the code's only when the code is a commit: `python -m bench`, `python -m bench.latency`
and `python -m bench.fanout` refuse to start when the measured files (src/, bench/, pyproject.toml)
differ from HEAD or hold untracked files, unless `--allow-dirty`, which records "<sha>+modified".
The benchmark's own outputs (bench/results.json and its plots) are left out of the check: the
latency bench runs after the main one has rewritten them. The check of the committed file
(tests/unit/test_bench_results.py) refuses a "+modified" revision and one that is not an ancestor
of HEAD.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ("src", "bench", "pyproject.toml")
OUTPUTS = (":(exclude)bench/results.json", ":(exclude,glob)bench/*.png")
MODIFIED = "+modified"


class NotACommit(SystemExit):
    """The tree is not a commit (or not a git checkout): the figures could not name their code.
    A SystemExit, so `python -m bench` prints the message and exits 1 before measuring anything."""


def git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def changed_files(root: Path = ROOT) -> list[str]:
    """The measured files that differ from HEAD, untracked ones included (`git status --porcelain`)."""
    status = git(root, "status", "--porcelain", "--untracked-files=all", "--", *MEASURED, *OUTPUTS)
    if status.returncode != 0:
        raise NotACommit(f"git status failed in {root}: {status.stderr.strip()}")
    return [line[3:] for line in status.stdout.splitlines() if line.strip()]


def imported_from(root: Path) -> bool:
    """Whether the triton_release this Python imports is this checkout's src/ (an editable install)."""
    import triton_release

    return Path(triton_release.__file__).resolve().is_relative_to((root / "src").resolve())


def revision(*, allow_dirty: bool = False) -> str:
    """The revision of this checkout, whose triton_release this Python must import (an editable
    install): `tree_revision` of it."""
    if not imported_from(ROOT):
        raise NotACommit(
            f"this Python imports triton_release from outside {ROOT / 'src'}: the figures would not be this "
            f"checkout's. Install it editable (`make install`) and run `.venv/bin/python -m bench`."
        )
    return tree_revision(ROOT, allow_dirty=allow_dirty)


def tree_revision(root: Path, *, allow_dirty: bool = False) -> str:
    """HEAD's full sha when the measured files are committed; "<sha>+modified" with `allow_dirty`
    when they are not; else NotACommit, saying how to proceed."""
    head = git(root, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        raise NotACommit(
            f"{root} is not a git checkout with a commit ({head.stderr.strip() or 'no HEAD'}), so the figures "
            "could not name the code they measured. Run the benchmark from a clone of the repository."
        )
    sha = head.stdout.strip()
    changed = changed_files(root)
    if not changed:
        return sha
    if allow_dirty:
        return sha + MODIFIED
    listed = "\n".join(f"  {path}" for path in changed[:10]) + (
        f"\n  ... and {len(changed) - 10} more" if len(changed) > 10 else ""
    )
    raise NotACommit(
        f"The measured files differ from HEAD ({sha[:12]}), so the figures would not be a commit's:\n"
        f"{listed}\n"
        "Commit them (or stash them) and run again, so that the figures name the commit they measured; or\n"
        f'pass --allow-dirty to measure the tree as it is, recorded as "{sha}{MODIFIED}" (the test of\n'
        "bench/results.json refuses such figures: keep them out of the committed file)."
    )


# -- the committed file's freshness ----------------------------------------------------------------


def recorded(results: dict) -> dict[str, str | None]:
    """Each revision a figures file records: its main figures' ("revision" at the top) and each
    section's measured apart ("fanout", "latency": a top-level object with its own "revision")."""
    found: dict[str, str | None] = {"main figures": results.get("revision")}
    for key, value in results.items():
        if isinstance(value, dict) and "revision" in value:
            found[key] = value["revision"]
    return found


def problems(results: dict, root: Path) -> list[str]:
    """What keeps a figures file from being `root`'s code: a revision missing, marked modified (a
    dirty tree), unknown to the repository or not an ancestor of HEAD; a quick profile's figures.
    Empty when it is fresh. A repository without history fails here too: nothing can be checked."""
    head = git(root, "rev-parse", "--verify", "HEAD")
    if head.returncode != 0:
        return [
            f"{root} has no git history ({head.stderr.strip() or 'no HEAD'}): the revisions of "
            "bench/results.json cannot be checked. Run the tests from a git clone, not an unpacked tarball."
        ]
    shallow = git(root, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    found = []
    if results.get("profile") == "quick":
        found.append("the main figures are a --quick run's (the smoke profile), not a full `make bench`")
    for section, rev in recorded(results).items():
        if not isinstance(rev, str) or not rev:
            found.append(f"{section}: no revision recorded")
            continue
        if MODIFIED in rev or "dirty" in rev:
            found.append(f"{section}: {rev} was measured on a modified tree, not on a commit")
            continue
        if git(root, "cat-file", "-e", f"{rev}^{{commit}}").returncode != 0:
            why = " (this clone is shallow: fetch its history with `git fetch --unshallow`)" if shallow else ""
            found.append(f"{section}: {rev} is not a commit of this repository{why}")
            continue
        if git(root, "merge-base", "--is-ancestor", rev, "HEAD").returncode != 0:
            found.append(f"{section}: {rev} is not an ancestor of HEAD (figures of another branch's code)")
    return found
