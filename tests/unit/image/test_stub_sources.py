"""The source stub's sources and its cache, on git mirrors made in tmp_path (no Docker, no network):
each `<name>.git` checked before a build, the one missing named, the compiled stub found again
only when its recorded digest holds."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_stub_choice import base

from triton_release import cache
from triton_release.errors import InfrastructureError, UsageError
from triton_release.image import compiler, sources, stub
from triton_release.image.sources import NAMES, Origin, Unavailable
from triton_release.settings.converters import sources_path, stub_sources


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def made_mirrors(tmp_path_factory) -> tuple[Path, str]:
    """Bare repositories named as python_backend's sources, each holding the ref r24.10 (and r26.07) needs
    (googletest's pinned commit is this folder's own: returned), packed and without the empty
    `refs` folder, as a copy that drops empty folders leaves them. Made once per module."""
    top = tmp_path_factory.mktemp("made")
    folder, work, pinned = top / "mirrors", top / "work", ""
    for name, ref in sources.wanted("r24.10").items():
        tree = work / name
        tree.mkdir(parents=True)
        (tree / "CMakeLists.txt").write_text(f"# {name}\n")
        git("init", "-q", "-b", "main", cwd=tree)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name, "--allow-empty", cwd=tree)
        git("add", ".", cwd=tree)
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tree", cwd=tree)
        if name == "googletest":
            pinned = git("rev-parse", "HEAD", cwd=tree)
        elif ref.startswith("v"):
            git("tag", ref, cwd=tree)
        else:
            git("branch", ref, cwd=tree)
            git("branch", "r26.07", cwd=tree)  # a current release's branch too (Triton's four repositories)
        git("clone", "-q", "--bare", str(tree), str(folder / f"{name}.git"))
        git("--git-dir", str(folder / f"{name}.git"), "pack-refs", "--all")
        shutil.rmtree(folder / f"{name}.git" / "refs")
    return folder, pinned


@pytest.fixture
def mirrors(made_mirrors, tmp_path, monkeypatch) -> Path:
    """A copy of the module's mirrors this test may change, googletest pinned at their commit."""
    made, pinned = made_mirrors
    monkeypatch.setitem(sources.UPSTREAM, "googletest", (sources.UPSTREAM["googletest"][0], pinned))
    return Path(shutil.copytree(made, tmp_path / "mirrors", symlinks=True))


def test_every_source_is_found_in_a_folder_of_mirrors_before_any_build(mirrors, tmp_path):
    found = sources.resolve(Origin(str(mirrors)), "r24.10")
    assert [s.name for s in found] == list(NAMES)
    assert all(len(s.commit) == 40 and s.url == f"file://{mirrors}/{s.name}.git" for s in found)
    assert {s.name: s.ref for s in found}["pybind11"] == "v2.13.6"
    sources.gather(Origin(str(mirrors)), found, tmp_path / "context")
    for source in found:  # one commit deep, named by the branch the builder stage clones
        repo = tmp_path / "context" / f"{source.name}.git"
        assert git("--git-dir", str(repo), "rev-parse", f"refs/heads/{source.branch}") == source.commit
        assert git("--git-dir", str(repo), "rev-list", "--count", source.commit) == "1"
    assert not (mirrors / "core.git" / "refs").exists()  # the mirrors are never written


def test_a_missing_mirror_is_named_with_its_upstream(mirrors):
    shutil.rmtree(mirrors / "core.git")
    with pytest.raises(Unavailable) as missing:
        sources.resolve(Origin(str(mirrors)), "r24.10")
    assert str(missing.value) == (
        f"stub_sources {mirrors} holds no core.git (a git mirror of https://github.com/triton-inference-server/core)"
    )
    assert missing.value.unreachable  # the mirror is incomplete: exit 3


def test_a_mirror_without_the_branch_is_named(mirrors):
    with pytest.raises(Unavailable, match=r"python_backend.git has no branch or tag r25.01"):
        sources.resolve(Origin(str(mirrors)), "r25.01")
    with pytest.raises(UsageError, match="stub_sources /nowhere/mirrors: no such folder"):
        sources.resolve(Origin("/nowhere/mirrors"), "r24.10")


def test_source_with_mirrors_plans_a_compile_and_auto_takes_it_past_numpy_2(mirrors, tmp_path):
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    numpy2 = base(numpy="2.2.4")
    choice = stub.choose(numpy2, None, "auto", str(mirrors))
    assert (choice.provider, choice.stub_file, choice.compiled) == ("source", None, False)
    assert choice.origin.startswith("python_backend r24.10 (") and f"from the mirrors in {mirrors}" in choice.origin
    assert choice.tried == (
        "stock and wheel: numpy 2.2.4 breaks NVIDIA's stubs of Triton 2.51.0 (pybind11 older than 2.12)",
    )
    assert choice.build is not None and choice.build.origin.boost == "system"
    assert choice.to_json()["source"]["from"] == str(mirrors)
    shutil.rmtree(mirrors / "dlpack.git")
    with pytest.raises(stub.Refused) as refused:  # no source stub: refused for numpy 2, naming the mirror
        stub.choose(numpy2, None, "auto", str(mirrors))
    assert "holds no dlpack.git" in str(refused.value)


def test_a_compiled_stub_is_found_again_only_while_its_digest_holds(mirrors, tmp_path):
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    build = stub.source_build(base(), "3.11", str(mirrors))
    assert compiler.cached(build) is None
    data = b"\x7fELF a stub"
    entry = build.entry
    entry.mkdir(parents=True)
    (entry / compiler.STUB_NAME).write_bytes(data)
    facts = {"inputs": build.inputs, "sha256": hashlib.sha256(data).hexdigest(), "boost": "1_83"}
    (entry / compiler.FACTS_NAME).write_text(json.dumps(facts))
    found = compiler.cached(build)
    assert found is not None and not found.compiled and found.path.read_bytes() == data
    assert stub.choose(base(), "3.11", "source", str(mirrors)).stub_file == found.path  # no compile planned

    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})  # another run: checked again
    (entry / compiler.STUB_NAME).write_bytes(b"\x7fELF another stub")
    assert compiler.cached(build) is None
    assert not entry.exists()  # discarded: compiled again


def test_the_key_holds_what_determines_the_stub(mirrors):
    build = stub.source_build(base(), "3.11", str(mirrors))
    inputs = build.inputs
    assert set(inputs) == {"base_image_id", "python", "boost", "sources", "stage"}
    assert inputs["sources"]["python_backend"]["ref"] == "r24.10" and inputs["boost"] == "system"
    other = stub.source_build(base(), "3.12", str(mirrors))
    assert other.key != build.key


def test_the_setting_takes_a_folder_or_a_url():
    assert stub_sources("") is None and stub_sources(None) is None
    assert stub_sources("../shared/triton-sources/") == "../shared/triton-sources"
    assert stub_sources("https://git.example.com/mirrors") == "https://git.example.com/mirrors"
    with pytest.raises(ValueError, match="is not a folder or an https://"):
        stub_sources("ftp://example.com/x")
    assert sources_path("mirrors", Path("/repo")) == "/repo/mirrors"
    assert sources_path("ssh://git@example.com/m", Path("/repo")) == "ssh://git@example.com/m"
    assert Origin("https://git.example.com/m").url("core") == "https://git.example.com/m/core.git"
    assert Origin().url("dlpack") == "https://github.com/dmlc/dlpack"


def test_the_summary_says_whether_it_was_compiled_or_cached(mirrors, tmp_path):
    from dataclasses import replace

    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    planned = stub.choose(base(), "3.11", "source", str(mirrors))
    assert "from python_backend r24.10 (" in planned.summary()
    assert planned.summary().endswith(f"(Triton 2.51.0, to be compiled: {compiler.ESTIMATE}, once)")
    done = replace(planned, stub_file=tmp_path / "stub", compiled=True)
    assert done.summary().endswith("(Triton 2.51.0, compiled in this run)")
    assert replace(planned, stub_file=tmp_path / "stub").summary().endswith("compiled before: from the cache)")


def test_r25_and_later_get_cmake_from_pypi_in_the_stage(tmp_path, monkeypatch):
    from support.wheels import make_wheel, offline_index

    def planned(release: str) -> tuple[sources.Source, ...]:
        return tuple(sources.Source(n, "u", r, "0" * 40) for n, r in sources.wanted(f"r{release}").items())

    assert not compiler.needs_new_cmake("24.10") and compiler.needs_new_cmake("25.01")
    assert compiler.needs_new_cmake("26.07") and not compiler.needs_new_cmake("")
    stage = compiler.builder_stage("nvcr.io/nvidia/tritonserver:25.10-py3", "3.12", planned("25.10"), "upstream")
    assert "python3 -m zipfile -e /sources/cmake.whl /opt/cmake-wheel" in stage
    assert "ln -sf /opt/cmake-wheel/cmake/data/bin/cmake /usr/local/bin/cmake" in stage
    assert stage.index("/usr/local/bin/cmake") < stage.index("cmake -S /src/python_backend")
    old = compiler.builder_stage("nvcr.io/nvidia/tritonserver:24.10-py3", "3.12", planned("24.10"), "upstream")
    assert "cmake.whl" not in old
    # downloaded on the host with pip, its settings applying (here: an index of one wheel)
    made = make_wheel(tmp_path / "index", "cmake", "3.31.10")
    offline_index(monkeypatch, tmp_path / "index")
    wheel = compiler.cmake_wheel(tmp_path / "wheels")
    assert wheel.name == made.name and wheel.parent == tmp_path / "wheels"
    assert compiler.cmake_wheel(tmp_path / "wheels") == wheel  # once


def test_a_wheel_pip_cannot_bring_says_which_and_how_to_go_on(tmp_path, monkeypatch):
    """cmake and nvidia-pytriton come through the same download on the host; each names itself."""
    from support.wheels import offline_index

    (tmp_path / "index").mkdir()
    offline_index(monkeypatch, tmp_path / "index")
    with pytest.raises(InfrastructureError, match=r"cmake>=3.31.8,<4 could not be downloaded from PyPI") as cmake:
        compiler.cmake_wheel(tmp_path / "wheels")
    assert "PIP_INDEX_URL" in str(cmake.value) and cmake.value.details
    with pytest.raises(
        InfrastructureError, match="Could not download nvidia-pytriton 0.7.0 from PyPI for its Python 3.11 stub"
    ):
        stub.pytriton_wheel("0.7.0", tmp_path / "wheels", "3.11")
    assert not list((tmp_path / "wheels").glob("*.whl"))


def test_a_current_release_with_another_python_plans_a_source_stub_from_its_own_branch(mirrors, tmp_path):
    """NGC 26.07 (Triton 2.71.0, Ubuntu 24.04, its stub linking Python 3.12) with the models on
    Python 3.11 (a base FROM it that adds 3.11): auto plans python_backend r26.07, as no
    nvidia-pytriton wheel carries Triton 2.71.0, and the builder stage gets CMake from PyPI."""
    from test_ngc import current_base

    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    found = current_base(pythons=("3.12", "3.11"))
    assert found.release.describe() == "Triton 2.71.0 (NGC 26.07, ubuntu 24.04)"
    assert stub.choose(found, None, "auto", str(mirrors)).kept  # Python 3.12: the stock stub
    choice = stub.choose(found, "3.11", "auto", str(mirrors))
    assert (choice.provider, choice.build.branch, choice.stub_file) == ("source", "r26.07", None)
    assert choice.tried[0].startswith("wheel: no nvidia-pytriton wheel is known to carry Triton 2.71.0")
    assert "with the Python 3.11 stub from python_backend r26.07 (" in choice.summary()
    assert choice.summary().endswith(
        f"(Triton 2.71.0, to be compiled: {compiler.ESTIMATE}, once, CMake 3.31.8 or newer from PyPI)"
    )
    assert "/sources/cmake.whl" in choice.build.stage()
    assert {s.name: s.ref for s in choice.build.sources}["python_backend"] == "r26.07"
