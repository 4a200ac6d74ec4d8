"""After X.Y.Z is in the registry a release is finished forward, never rolled back: a failure
there keeps the bump, and a rerun on a fresh checkout (what CI does) makes the release commit
and its git tag with the very version folders that were shipped."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time

import docker
import pytest

from support.models import PYTHON_MODEL
from support.registries import RegistryProxy
from support.reports import read_report
from support.stack import SERVERS
from support.tool import release_command, start
from triton_release.contract import RELEASED_VERSIONS_LABEL
from triton_release.history.releases import versions_in

pytestmark = pytest.mark.integration


def test_a_failure_after_the_push_is_finished_by_a_rerun_with_the_shipped_folders(ws):
    ws.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    ws.commit("a: new code")
    hook = ws.root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'a hook refused the commit' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    try:
        failed = ws.release("--commit")
    finally:
        hook.unlink()
    assert failed.code == 3, failed.out[-3000:]
    assert ws.registry.digest("1.1.0") is not None  # published
    assert "undo-bump" not in failed.report["steps"]
    assert (ws.models / "a" / "2" / "model.py").exists()  # the bump that shipped stays
    shipped = ws.registry.digest("1.1.0")

    ws.git_repo.git("checkout", "-q", "--", ".")  # a fresh checkout of the same commit, as a CI rerun has
    ws.git_repo.git("clean", "-qfd", "model_repository")
    rerun = ws.release("--commit")
    assert rerun.code == 0, rerun.out[-3000:]
    assert rerun.report["steps"]["commit"]["committed"] is True
    assert rerun.report["version"] == "1.1.0"
    assert ws.git_repo.git("log", "-1", "--format=%s") == "release 1.1.0"
    assert ws.git_repo.git("tag", "--points-at", "HEAD") == "v1.1.0"
    assert (ws.models / "a" / "2" / "model.py").read_text().startswith("# 2")  # what 1.1.0 shipped as a/2
    assert (ws.models / "a" / "1" / "model.py").read_text() == PYTHON_MODEL
    assert ws.registry.digest("1.1.0") == shipped == ws.registry.digest("latest")
    assert ws.git_repo.git("status", "--porcelain") == ""


@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, signal.SIGINT, signal.SIGTERM],  # noqa: PT014 -- SIGINT twice on purpose, a rerun of the same race
    ids=["sigint", "sigint-again", "sigterm"],
)
def test_a_signal_during_the_push_undoes_the_bump_when_nothing_was_published(ws, signum):
    """The push of X.Y.Z is held at its manifest PUT (a slow registry); a signal then stops the run:
    exit 130 or 143 within seconds, X.Y.Z absent, the working tree as it was, no container."""
    entered, hold = threading.Event(), threading.Event()

    def held(proxy, path, forward):
        entered.set()
        hold.wait(60)
        return 503, [], b"held, then dropped by the test"

    ws.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    ws.commit("a: new code")
    before = ws.state()
    newest = versions_in(ws.registry.tags())[-1]
    version = f"{newest.major}.{newest.minor + 1}.0"  # the minor release this change makes
    report = ws.root.parent / "push-signal.json"
    with RegistryProxy(version, held) as proxy:
        target = f"{proxy.address}/{ws.registry.name}"
        run = start(release_command(target, "--report", str(report)), cwd=ws.root)
        try:
            deadline = time.monotonic() + 180
            while not entered.wait(0.5) and time.monotonic() < deadline:
                assert run.poll() is None, run.communicate()[0][-3000:]
            assert entered.is_set(), "the push never reached the manifest PUT"
            started = time.monotonic()
            run.send_signal(signum)
            out, _ = run.communicate(timeout=60)
        finally:
            hold.set()
            if run.poll() is None:
                run.kill()
    assert run.returncode == 128 + signum, out[-3000:]
    assert time.monotonic() - started < 30
    assert read_report(report)["error"]["exit_code"] == 128 + signum
    after = ws.state()
    assert version not in after.tags and after.tags == before.tags
    assert after.status == before.status and after.files == before.files
    assert not ws.docker.containers.list(all=True, filters={"label": SERVERS})


def test_a_signal_once_the_release_is_up_keeps_the_bump_and_says_the_rerun_finishes_it(ws):
    """The push put X.Y.Z up; the channel's tag PUT is held and a SIGTERM stops the run there: exit
    143, the bump kept, the message saying the release stands and a rerun finishes it, which it does."""
    entered, hold, forward_now = threading.Event(), threading.Event(), threading.Event()

    def held(proxy, path, forward):
        if forward_now.is_set():
            return forward()
        entered.set()
        hold.wait(60)
        return 503, [], b"held, then dropped by the test"

    ws.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    ws.commit("a: new code")
    newest = versions_in(ws.registry.tags())[-1]
    version = f"{newest.major}.{newest.minor + 1}.0"
    with RegistryProxy("latest", held) as proxy:
        command = release_command(f"{proxy.address}/{ws.registry.name}", "--commit")
        run = start(command, cwd=ws.root)
        try:
            deadline = time.monotonic() + 180
            while not entered.wait(0.5) and time.monotonic() < deadline:
                assert run.poll() is None, run.communicate()[0][-3000:]
            assert entered.is_set(), "the release never reached the channel's tag"
            run.send_signal(signal.SIGTERM)
            out, _ = run.communicate(timeout=60)
        finally:
            hold.set()
            if run.poll() is None:
                run.kill()
        assert run.returncode == 143, out[-3000:]
        assert f"interrupted by SIGTERM with {version} in the registry" in out, out[-3000:]
        assert "a rerun of triton-release on this commit finishes it" in out, out[-3000:]
        assert ws.registry.digest(version) is not None
        assert (ws.models / "a" / "2" / "model.py").exists()  # the bump that shipped stays
        forward_now.set()
        rerun = subprocess.run(command, cwd=ws.root, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert ws.registry.digest("latest") == ws.registry.digest(version)
    assert ws.git_repo.git("log", "-1", "--format=%s") == f"release {version}"
    assert ws.git_repo.git("status", "--porcelain") == ""


def test_a_write_into_the_bumped_folder_after_the_push_is_refused_before_the_commit(ws):
    """A process working inside version folder N (its current directory: not a file open for
    writing, which the bump would see) saves model.py while the release moves the channel: the bump
    moved N to N+1, so the save lands in N+1, after the check before the push. The release commit
    proves N+1 against the tree the image was built from: refused, no commit, no git tag, the
    registry's X.Y.Z as built; the advice followed, the rerun makes the commit and the tag."""
    ws.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    head = ws.commit("a: new code")
    newest = versions_in(ws.registry.tags())[-1]
    version = f"{newest.major}.{newest.minor + 1}.0"
    writer = subprocess.Popen(  # a shell in the version folder, say, whose user saves later
        [
            sys.executable,
            "-c",
            "import sys\n"
            "sys.stdin.readline()\n"
            "open('model.py', 'a').write('# saved during the release\\n')\n"
            "print('written', flush=True)\n",
        ],
        cwd=ws.models / "a" / "1",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    saved = threading.Event()

    def save_then_forward(proxy, path, forward):
        if not saved.is_set():  # the channel moves after the push and the check before it
            writer.stdin.write("save\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "written"
            saved.set()
        return forward()

    local_tags: list[str] = []  # the build's and the push's local tags, by the proxy's address
    try:
        with RegistryProxy("latest", save_then_forward) as proxy:
            target = f"{proxy.address}/{ws.registry.name}"
            local_tags += [f"{target}:candidate", f"{target}:{version}"]
            command = release_command(target, "--commit", "--load-timeout", "30")
            refused = subprocess.run(command, cwd=ws.root, capture_output=True, text=True, timeout=600)
            out = refused.stdout + refused.stderr
            assert saved.is_set(), out[-3000:]
            assert refused.returncode == 1, out[-3000:]
            message = " ".join(out.split())
            assert "model_repository/a/2/model.py (changed)" in message, out[-3000:]
            assert f"No release commit and no git tag v{version} were made" in message
            assert "Traceback" not in out
            assert ws.git_repo.git("rev-parse", "HEAD") == head  # no release commit
            assert ws.git_repo.git("tag", "--list", f"v{version}") == ""
            assert ws.git_repo.git("diff", "--cached", "--name-only") == ""
            shipped = ws.registry.digest(version)
            assert shipped is not None  # published as built and tested: its record names head's a/1
            labels = ws.registry.image_config(version)["config"]["Labels"]
            record = json.loads(labels[RELEASED_VERSIONS_LABEL])
            assert record["a"]["2"] == ws.git_repo.git("rev-parse", f"{head}:model_repository/a/1")

            # the advice: the edit moved out, the folders put back as committed, and run again
            edit = (ws.models / "a" / "2" / "model.py").read_text()
            assert edit.endswith("# saved during the release\n")
            ws.git_repo.git("checkout", "HEAD", "--", "model_repository/a/1")
            shutil.rmtree(ws.models / "a" / "2")
            rerun = subprocess.run(command, cwd=ws.root, capture_output=True, text=True, timeout=600)
    finally:
        writer.kill()
        writer.wait()
        for tag in local_tags:
            with contextlib.suppress(docker.errors.ImageNotFound):
                ws.docker.images.remove(tag)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert ws.registry.digest(version) == shipped  # never rebuilt or pushed again
    assert ws.git_repo.git("log", "-1", "--format=%s") == f"release {version}"
    assert ws.git_repo.git("tag", "--points-at", "HEAD") == f"v{version}"
    assert ws.git_repo.git("rev-parse", "HEAD:model_repository/a/2") == record["a"]["2"]
    assert ws.git_repo.git("status", "--porcelain") == ""
