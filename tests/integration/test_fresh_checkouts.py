"""Releases as a CI runner makes them: every run a fresh clone of the origin, the action's
default inputs (no commit), so no bump of an earlier run survives in git. The registry's record
keeps every released version byte for byte: real build, tritonserver and registry."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest

from support.models import python_model_files
from support.reports import read_report
from support.stack import REGISTRY
from support.tool import release_command
from triton_release import contract
from triton_release.registry.client import Manifest, RegistryRepository

pytestmark = pytest.mark.integration


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class Origin:
    """A bare origin, an author's clone that pushes to it, and a fresh clone per release."""

    def __init__(self, tmp_path: Path, target: str) -> None:
        self.tmp, self.target = tmp_path, target
        self.bare = tmp_path / "origin.git"
        git(tmp_path, "init", "-q", "--bare", "-b", "main", str(self.bare))
        self.author = tmp_path / "author"
        git(tmp_path, "clone", "-q", str(self.bare), str(self.author))
        for key, value in (("user.name", "author"), ("user.email", "author@example.com")):
            git(self.author, "config", key, value)
        self.runs = 0

    def push(self, files: dict[str, str], message: str) -> None:
        for rel, text in files.items():
            path = self.author / "model_repository" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.author, "add", "-A")
        git(self.author, "commit", "-q", "-m", message)
        git(self.author, "push", "-q", "origin", "HEAD:main")

    def edit(self, rel: str, line: str, message: str) -> None:
        path = self.author / "model_repository" / rel
        self.push({rel: path.read_text() + line}, message)

    def clone(self, name: str, depth: int | None = None) -> Path:
        """A fresh clone of the origin: full history, as actions/checkout with fetch-depth: 0; with
        `depth`, shallow and without tags, as actions/checkout makes it by default (depth 1)."""
        clone = self.tmp / name
        if depth is None:
            git(self.tmp, "clone", "-q", str(self.bare), str(clone))
        else:
            git(self.tmp, "clone", "-q", "--no-tags", "--depth", str(depth), f"file://{self.bare}", str(clone))
        return clone

    def run(self, clone: Path, *flags: str) -> subprocess.CompletedProcess:
        """`release` to the target in `clone`, its output captured, its exit code unchecked."""
        return subprocess.run(release_command(self.target, *flags), cwd=clone, capture_output=True, text=True)

    def release(self, *flags: str, depth: int | None = None) -> tuple[dict, float]:
        """`release` in a fresh clone with the defaults: its report and seconds, checking it exits 0."""
        self.runs += 1
        clone = self.clone(f"run-{self.runs}", depth)
        report = self.tmp / f"report-{self.runs}.json"
        started = time.monotonic()
        done = self.run(clone, "--load-timeout", "60", "--report", str(report), *flags)
        seconds = time.monotonic() - started
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        return read_report(report), seconds


def version_folders(client, image: str) -> dict[str, bytes]:
    """'model/version' -> the bytes of every file of that version folder in `image`, as one blob."""
    repository, tag = image.rsplit(":", 1)
    client.images.pull(repository, tag=tag)
    container = client.containers.create(image, command=["true"], entrypoint=[])
    try:
        stream, _ = container.get_archive("/models")
        data = io.BytesIO(b"".join(stream))
    finally:
        container.remove(force=True)
    found: dict[str, list[tuple[str, bytes]]] = {}
    with tarfile.open(fileobj=data) as tar:
        for member in tar:
            parts = member.name.split("/")
            if member.isfile() and len(parts) > 3 and parts[2].isdigit():
                found.setdefault(f"{parts[1]}/{parts[2]}", []).append(
                    ("/".join(parts[3:]), tar.extractfile(member).read())
                )
    return {
        key: b"\0".join(name.encode() + b"\0" + body for name, body in sorted(files)) for key, files in found.items()
    }


@pytest.fixture
def origin(tmp_path, docker_client):
    target = f"{REGISTRY}/triton-release-test/fresh-{uuid.uuid4().hex[:12]}"
    made = Origin(tmp_path, target)
    yield made
    registry = RegistryRepository.parse(target)
    for tag in registry.tags():
        for name in (f"{target}:{tag}",):
            with contextlib.suppress(Exception):
                docker_client.images.remove(name, force=True)
    with contextlib.suppress(Exception):
        docker_client.images.remove(f"{target}:candidate", force=True)


def test_three_releases_from_fresh_clones_never_change_a_released_version(origin, docker_client, capsys):
    origin.push({**python_model_files("a"), **python_model_files("b")}, "two models")
    first, t1 = origin.release()
    assert first["version"] == "1.0.0"
    v1 = version_folders(docker_client, f"{origin.target}:1.0.0")
    assert set(v1) == {"a/1", "b/1"}

    origin.edit("a/1/model.py", "\n# change one\n", "a: change one")
    second, t2 = origin.release()
    assert second["version"] == "1.1.0"
    v2 = version_folders(docker_client, f"{origin.target}:1.1.0")
    assert set(v2) == {"a/1", "a/2", "b/1"}
    assert v2["a/1"] == v1["a/1"] and v2["b/1"] == v1["b/1"]
    assert b"# change one" in v2["a/2"]

    # the runner's bump of a/2 died with it: git still has only a/1, with both changes
    origin.edit("a/1/model.py", "\n# change two\n", "a: change two")
    third, t3 = origin.release()
    assert third["version"] == "1.2.0", third.get("error")
    v3 = version_folders(docker_client, f"{origin.target}:1.2.0")
    assert set(v3) == {"a/1", "a/2", "a/3", "b/1"}
    for folder in ("a/1", "a/2", "b/1"):
        assert v3[folder] == v2[folder], folder  # every released version, byte for byte
    assert b"# change one" in v3["a/3"] and b"# change two" in v3["a/3"]
    bump = third["steps"]["bump"]
    assert bump["bumps"] == [{"model": "a", "from": 1, "to": 3}]
    assert [(c["model"], c["version"]) for c in bump["carried"]] == [("a", 2)]
    push = third["steps"]["push"]
    assert push["layers_uploaded"] + push["layers_mounted"] == 1  # a/3 alone: carried versions upload nothing

    # a fourth run finds nothing new to release
    fourth, _ = origin.release()
    assert fourth["released"] is False and "build" not in fourth["steps"]
    registry = RegistryRepository.parse(origin.target)
    new_bytes = [new_layer_bytes(registry, before, after) for before, after in (("1.0.0", "1.1.0"), ("1.1.0", "1.2.0"))]
    assert new_bytes[1] < 4096  # a/3's small layer: nothing of a/1 or a/2 went up again
    with capsys.disabled():
        print(
            f"\nfresh-checkout releases: {t1:.1f} s, {t2:.1f} s, {t3:.1f} s; new layer bytes in the registry: "
            f"1.1.0 {new_bytes[0]}, 1.2.0 {new_bytes[1]}"
        )


def new_layer_bytes(registry: RegistryRepository, before: str, after: str) -> int:
    """Bytes of the layers `after` holds that `before` did not: what its push had to upload."""
    held = {layer["digest"] for layer in registry.manifest(before).layers}
    return sum(layer["size"] for layer in registry.manifest(after).layers if layer["digest"] not in held)


def test_a_shallow_clone_as_actions_checkout_makes_it_releases_only_the_change(origin, docker_client):
    """fetch-depth: 1, the default: the history since the last release is fetched, not taken for a
    first release of every model (nor a raw git error)."""
    origin.push({**python_model_files("a"), **python_model_files("b")}, "two models")
    origin.release(depth=1)
    origin.edit("a/1/model.py", "\n# change one\n", "a: change one")
    second, _ = origin.release(depth=1)
    assert second["version"] == "1.1.0" and second["changed_models"] == ["a"], second["steps"]["changed"]
    assert second["steps"]["bump"]["bumps"] == [{"model": "a", "from": 1, "to": 2}]
    assert second["steps"]["test"]["cases"] and {c["case"] for c in second["steps"]["test"]["cases"]} == {"a/basic"}
    assert any("shallow clone" in w for w in second["steps"]["changed"]["warnings"])
    v1, v2 = (version_folders(docker_client, f"{origin.target}:{v}") for v in ("1.0.0", "1.1.0"))
    assert v2["a/1"] == v1["a/1"] and v2["b/1"] == v1["b/1"] and b"# change one" in v2["a/2"]


def forge(target: str, tag: str, to: str | None = None, *, env: str = "", **labels: str) -> str:
    """Rewrite `tag`'s image registry-side (to `to`, else in place), as someone with push rights
    would: a new config (`labels` changed, `env` added) over the same layers. Its digest."""
    registry = RegistryRepository.parse(target)
    manifest = registry.manifest(tag)
    config = registry.image_config(tag)
    config["config"]["Labels"].update(labels)
    if env:
        config["config"]["Env"] = [*config["config"].get("Env", []), env]
    body = json.dumps(config).encode()
    digest = registry.put_blob(body)
    forged = json.loads(manifest.body)
    forged["config"] = {**forged["config"], "digest": digest, "size": len(body)}
    return registry.put_manifest(to or tag, Manifest.of(manifest.media_type, json.dumps(forged).encode()))


def test_an_image_pushed_as_the_newest_release_by_someone_else_is_never_finished(origin, docker_client):
    """The real layers and labels plus one ENV, pushed as 1.1.0 with no evidence: a rerun with nothing
    changed would "finish the interrupted release", sign it and give it the channel. Refused."""
    origin.push(python_model_files("a"), "one model")
    origin.release()
    registry = RegistryRepository.parse(origin.target)
    latest = registry.digest("latest")
    forged = forge(origin.target, "1.0.0", "1.1.0", env="LD_PRELOAD=/models/a/1/evil.so")
    done = origin.run(origin.clone("after-forged-push"))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    message = " ".join(done.stderr.split())
    assert f"{origin.target}:1.1.0 ({forged}) in the registry is not a proven build of commit" in message
    assert registry.digest("latest") == latest and registry.digest("1.1") is None
    assert registry.digest(contract.evidence_tag(forged)) is None  # nothing signed, nothing attached


def test_a_record_forged_in_the_registry_is_refused_before_anything_is_built(origin, docker_client):
    """The newest release's record rewritten so that a/1 is b/1's tree (one the clone holds): the
    next fresh clone would ship b's code as a/1, untested. git never held that tree under a/."""
    b = python_model_files("b")
    origin.push({**python_model_files("a"), **b, "b/1/model.py": "# b's own code\n" + b["b/1/model.py"]}, "two")
    origin.release()
    registry = RegistryRepository.parse(origin.target)
    labels = registry.image_config("1.0.0")["config"]["Labels"]
    shipped = json.loads(labels["triton-release.versions"])
    assert shipped["a"]["1"] != shipped["b"]["1"]
    forge(origin.target, "1.0.0", **{"triton-release.versions": json.dumps({**shipped, "a": shipped["b"]})})
    tags = registry.tags()
    origin.edit("b/1/model.py", "\n# b: a comment\n", "b: a comment")
    done = origin.run(origin.clone("after-forgery"))
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    message = " ".join(done.stderr.split())
    assert "model_repository/a/1 as git tree" in message and "rewritten after the release" in message
    assert "build: done" not in done.stderr and registry.tags() == tags


def test_a_released_version_changed_in_git_is_refused_naming_the_release(origin, docker_client):
    origin.push(python_model_files("a"), "one model")
    origin.release()
    origin.edit("a/1/model.py", "\n# change one\n", "a: change one")
    origin.release()
    # someone commits the bump by hand, but edits version 1 on the way
    (origin.author / "model_repository" / "a" / "2").mkdir()
    for name in ("model.py",):
        source = origin.author / "model_repository" / "a" / "1" / name
        (origin.author / "model_repository" / "a" / "2" / name).write_text(source.read_text() + "\n# three\n")
    origin.edit("a/1/model.py", "\n# edited again\n", "a: a released version edited")
    clone = origin.clone("refused")
    done = origin.run(clone)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "version 1 of a was released in" in done.stderr and ":1.1.0" in done.stderr
    assert RegistryRepository.parse(origin.target).tags().count("1.2.0") == 0
    assert git(clone, "status", "--porcelain") == ""


def test_the_pushed_back_bump_is_what_the_next_fresh_clone_builds_on(origin, docker_client):
    origin.push(python_model_files("a"), "one model")
    origin.release("--commit", "--push-commit")
    assert git(origin.tmp, "--git-dir", str(origin.bare), "tag", "--list") == "v1.0.0"
    origin.edit("a/1/model.py", "\n# change one\n", "a: change one")
    second, _ = origin.release("--commit", "--push-commit")
    assert second["steps"]["push-back"]["outcome"] == "pushed"
    assert git(origin.tmp, "--git-dir", str(origin.bare), "log", "-1", "--format=%s", "main") == "release 1.1.0"
    git(origin.author, "pull", "-q", "--ff-only", "origin", "main")
    origin.edit("a/2/model.py", "\n# change two\n", "a: change two, in version 2 as committed")
    third, _ = origin.release("--commit", "--push-commit")
    assert third["version"] == "1.2.0" and third["steps"]["bump"]["carried"] == []
    assert third["steps"]["bump"]["bumps"] == [{"model": "a", "from": 2, "to": 3}]
    v2, v3 = (version_folders(docker_client, f"{origin.target}:{v}") for v in ("1.1.0", "1.2.0"))
    assert v3["a/1"] == v2["a/1"] and v3["a/2"] == v2["a/2"]


def test_a_refused_push_back_warns_and_the_next_fresh_clone_still_keeps_every_version(origin, docker_client):
    hook = origin.bare / "hooks" / "pre-receive"
    origin.push(python_model_files("a"), "one model")
    hook.write_text("#!/bin/sh\necho 'protected branch: pushes are refused' >&2\nexit 1\n")
    hook.chmod(0o755)
    origin.release("--commit", "--push-commit")
    hook.unlink()  # the author may push; the runner's token may not (the hook is back below)
    origin.edit("a/1/model.py", "\n# change one\n", "a: change one")
    hook.write_text("#!/bin/sh\necho 'protected branch: pushes are refused' >&2\nexit 1\n")
    hook.chmod(0o755)
    second, _ = origin.release("--commit", "--push-commit")
    assert second["released"] is True and second["steps"]["push-back"]["outcome"] == "refused"
    assert "protected branch" in second["steps"]["push-back"]["reason"]
    hook.unlink()
    origin.edit("a/1/model.py", "\n# change two\n", "a: change two")
    third, _ = origin.release()
    assert third["version"] == "1.2.0"
    v2, v3 = (version_folders(docker_client, f"{origin.target}:{v}") for v in ("1.1.0", "1.2.0"))
    assert v3["a/1"] == v2["a/1"] and v3["a/2"] == v2["a/2"] and set(v3) == {"a/1", "a/2", "a/3"}


def test_a_mixed_case_repository_is_released_under_its_lower_cased_name(tmp_path, docker_client):
    name = f"triton-release-test/MixedCase-{uuid.uuid4().hex[:8]}"
    made = Origin(tmp_path, f"{REGISTRY}/{name}")
    made.push(python_model_files("a"), "one model")
    done = made.run(made.clone("clone"))
    assert done.returncode == 0, done.stderr[-3000:]
    lower = f"{REGISTRY}/{name.lower()}"
    assert f"lower-cased to {lower}" in done.stdout + done.stderr
    assert "1.0.0" in RegistryRepository.parse(lower).tags()
    for tag in ("1.0.0", "candidate"):
        with contextlib.suppress(Exception):
            docker_client.images.remove(f"{lower}:{tag}", force=True)
