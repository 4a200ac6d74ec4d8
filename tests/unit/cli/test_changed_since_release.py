"""`changed` without --base: the change since the last release, found as `release` finds it."""

from __future__ import annotations

import pytest

from support.models import python_config, python_model_files
from support.registries import FakeRegistry
from support.reports import parse_report
from triton_release.cli.main import main


@pytest.fixture
def tagged(git_repo, monkeypatch):
    """Release v1.0.0 of model a (git tag), then a config change on top."""
    git_repo.write(python_model_files("a"))
    git_repo.commit("release 1.0.0")
    git_repo.git("tag", "v1.0.0")
    git_repo.write({"a/config.pbtxt": python_config("a", max_batch_size=4)})
    git_repo.commit("smaller batches")
    monkeypatch.chdir(git_repo.root)
    return git_repo


def changed(repo, capsys, *argv, env=None) -> tuple[int, dict, str]:
    code = main(["changed", "--json", *argv], env={"HOME": str(repo.root), **(env or {})})
    captured = capsys.readouterr()
    return code, parse_report(captured.out), captured.err


def test_without_base_it_starts_from_the_last_release_tag_not_a_first_release(tagged, capsys):
    code, report, err = changed(tagged, capsys)
    step = report["steps"]["changed"]
    assert code == 0
    assert step["base"] == tagged.git("rev-parse", "v1.0.0") and step["base_from"] == "git tag v1.0.0"
    assert step["changes"]["changed"] == ["a"]
    assert (step["previous_version"], step["version"]) == ("1.0.0", "1.0.1")
    assert "first release" not in err
    assert (
        "release: patch -> 1.0.1 (a: config.pbtxt only: no version folder bumped; previous: 1.0.0; base: git tag v1.0.0)"
        in err
    ), err


def test_from_a_subfolder_too(tagged, capsys, monkeypatch):
    (tagged.root / "docs").mkdir()
    monkeypatch.chdir(tagged.root / "docs")
    code, report, _ = changed(tagged, capsys)
    assert code == 0 and report["steps"]["changed"]["base_from"] == "git tag v1.0.0"


def test_with_a_registry_repository_it_reads_the_releases_there(tagged, capsys):
    with FakeRegistry(auth=False, tags=("1.0.0", "latest")) as fake:
        (tagged.root / "triton-release.yaml").write_text(f"repository: {fake.address}/team/models\n")
        code, report, err = changed(tagged, capsys)
    step = report["steps"]["changed"]
    assert code == 0, err
    assert step["base_from"] == f"git tag v1.0.0 of the latest release {fake.address}/team/models:1.0.0"
    assert (step["previous_version"], step["previous_from"], step["version"]) == ("1.0.0", "registry", "1.0.1")
    assert sum(1 for method, path in fake.requests if "tags/list" in path) == 1  # read once


@pytest.mark.parametrize("status", [401, 503])
def test_a_registry_it_cannot_read_is_a_warning_and_git_tags_decide(tagged, capsys, status):
    with FakeRegistry(status=status) as fake:
        (tagged.root / "triton-release.yaml").write_text(f"repository: {fake.address}/team/models\n")
        code, report, err = changed(tagged, capsys)
    step = report["steps"]["changed"]
    assert code == 0, err
    assert step["base_from"] == "git tag v1.0.0" and step["previous_version"] == "1.0.0"
    warnings = [line for line in err.splitlines() if line.startswith("warning: could not read the releases in")]
    assert len(warnings) == 1 and f"{fake.address}/team/models" in warnings[0]


def test_an_unreachable_registry_is_a_warning_too(tagged, capsys):
    (tagged.root / "triton-release.yaml").write_text("repository: 127.0.0.1:9/team/models\n")
    code, report, err = changed(tagged, capsys)
    assert code == 0 and report["steps"]["changed"]["base_from"] == "git tag v1.0.0"
    assert "unreachable" in err


def test_without_any_release_it_is_a_first_release(git_repo, capsys, monkeypatch):
    git_repo.write(python_model_files("a"))
    git_repo.commit()
    monkeypatch.chdir(git_repo.root)
    code, report, _ = changed(git_repo, capsys)
    step = report["steps"]["changed"]
    assert code == 0 and step["base"] is None and step["version"] == "1.0.0"
    assert step["changes"]["changed"] == ["a"]


def test_an_explicit_base_keeps_its_behaviour(tagged, capsys):
    (tagged.root / "triton-release.yaml").write_text("repository: 127.0.0.1:9/team/models\n")  # never asked
    code, report, err = changed(tagged, capsys, "--base", "HEAD~1")
    step = report["steps"]["changed"]
    assert code == 0 and step["base_from"] == "--base" and "version" not in step
    assert "warning" not in err and "release: patch (" in err
    code, report, _ = changed(tagged, capsys, "--base", "0" * 40)
    assert code == 0 and report["steps"]["changed"]["base"] is None  # GitHub's "no previous commit"


def test_without_base_the_release_line_says_why_it_is_major(tagged, capsys):
    """The reason for the kind is on the default line as on the --base one."""
    tagged.write({"a/config.pbtxt": python_config("a", dims="[ 8 ]")})
    tagged.commit("wider input")
    code, _, err = changed(tagged, capsys)
    assert code == 0, err
    line = next(line for line in err.splitlines() if line.startswith("release: major"))
    _, _, with_base = changed(tagged, capsys, "--base", "v1.0.0")
    reason = next(line for line in with_base.splitlines() if line.startswith("release: major"))
    reason = reason.removeprefix("release: major (").removesuffix(")")
    assert reason and f"({reason}; previous: 1.0.0; base: git tag v1.0.0)" in line, (line, reason)


def test_bump_without_base_bumps_the_change_since_the_last_release(tagged, capsys):
    """`bump` finds the base as `changed` does: a change inside version 1 since v1.0.0 makes 2/."""
    tagged.write({"a/1/model.py": (tagged.models / "a/1/model.py").read_text() + "# faster\n"})
    tagged.commit("a: faster")
    code = main(["bump"], env={"HOME": str(tagged.root)})
    err = capsys.readouterr()
    assert code == 0, err
    assert "no version folder to bump" not in err.out
    assert "model_repository/a/2: new version folder with the head contents" in err.out, err.out
    assert (tagged.models / "a" / "2" / "model.py").read_text().endswith("# faster\n")
