"""The action's published image: action.yml runs docker://NAME:vN, action-image.yml pushes NAME
under the tag's version and moving major (reading NAME from action.yml), and the local stack
builds NAME:vN from the same files the workflow builds."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from stack.stack import ACTION_CONTEXT, action_image
from support.stack import ROOT

ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
WORKFLOW_FILE = ROOT / ".github" / "workflows" / "action-image.yml"
WORKFLOW = yaml.safe_load(WORKFLOW_FILE.read_text())
STEPS = WORKFLOW["jobs"]["publish"]["steps"]
PUBLISHED = re.compile(
    r"docker://(?P<name>ghcr\.io/(?P<owner>[a-z0-9][a-z0-9-]*)/triton-release):(?P<major>v[1-9][0-9]*)"
)


def step(uses: str = "", id: str = "") -> dict:
    [found] = [s for s in STEPS if (uses and s.get("uses", "").startswith(uses + "@")) or (id and s.get("id") == id)]
    return found


def test_action_yml_runs_the_published_image_by_its_moving_major_tag():
    assert ACTION["runs"]["using"] == "docker"
    image = PUBLISHED.fullmatch(ACTION["runs"]["image"])
    assert image, f"runs.image is {ACTION['runs']['image']!r}, not docker://ghcr.io/OWNER/triton-release:vN"
    assert action_image() == f"{image['name']}:{image['major']}"  # the name the stack builds for act
    # the README's `uses: OWNER/triton-release@vN` is the same action and major
    used = set(re.findall(r"([\w-]+)/triton-release@(v\d+)\b", (ROOT / "README.md").read_text()))
    assert used == {(image["owner"], image["major"])}


def github_tag_filter(pattern: str) -> re.Pattern:
    """A GitHub `on.push.tags` glob (the subset the workflow uses) as a regular expression."""
    return re.compile("".join({".": r"\.", "*": "[^/]*"}.get(c, c) for c in pattern))


@pytest.mark.parametrize(
    ("tag", "publishes"),
    [
        ("v1", True),
        ("v1.2.3", True),
        ("v1.3.0-rc.1", True),
        ("v12.0.10", True),
        ("v1.2", False),
        ("latest", False),
        ("1.2.3", False),
        ("release-1", False),
    ],
)
def test_the_workflow_runs_on_version_tags_only(tag, publishes):
    on = WORKFLOW.get("on", WORKFLOW.get(True))  # YAML 1.1 reads a bare `on` as true
    assert set(on) == {"push"}
    patterns = on["push"]["tags"]
    assert any(github_tag_filter(p).fullmatch(tag) for p in patterns) is publishes


def test_the_workflow_builds_and_pushes_with_the_official_docker_actions_pinned():
    assert WORKFLOW["permissions"] == {"contents": "read", "packages": "write"}
    docker_actions = {
        s["uses"].split("@")[0]: s["uses"].split("@")[1] for s in STEPS if s.get("uses", "").startswith("docker/")
    }
    assert {"docker/login-action", "docker/metadata-action", "docker/build-push-action"} <= set(docker_actions)
    assert all(re.fullmatch(r"v\d+(\.\d+\.\d+)?|[0-9a-f]{40}", ref) for ref in docker_actions.values())
    assert step("docker/login-action")["with"]["registry"] == "ghcr.io" == action_image().split("/")[0]

    meta = step("docker/metadata-action")["with"]
    assert meta["images"] == "${{ steps.name.outputs.name }}"
    tags = meta["tags"].split()
    assert "type=semver,pattern=v{{version}}" in tags and "type=semver,pattern=v{{major}}" in tags
    assert "latest=false" in meta["flavor"]

    build = step("docker/build-push-action")["with"]
    assert build["context"] == "." and build["push"] is True
    # the OCI labels (source, revision, version) and the tags come from the metadata step
    assert build["tags"] == "${{ steps.meta.outputs.tags }}" and build["labels"] == "${{ steps.meta.outputs.labels }}"


def run_name_step(tmp_path: Path, tag: str, action_yml: str | None = None) -> tuple[int, str, str]:
    """The workflow's `name` step, as a runner runs it (bash -eo pipefail), in a checkout holding
    action.yml: (exit code, its `name` output, its stdout)."""
    name_step = step(id="name")
    assert name_step["env"] == {"TAG": "${{ github.ref_name }}"}
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    if action_yml is None:
        shutil.copy2(ROOT / "action.yml", checkout / "action.yml")
    else:
        (checkout / "action.yml").write_text(action_yml)
    script = tmp_path / "step.sh"
    script.write_text(name_step["run"])
    output = tmp_path / "github-output"
    output.touch()
    run = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=checkout,
        env={"PATH": "/usr/bin:/bin", "TAG": tag, "GITHUB_OUTPUT": str(output)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return run.returncode, outputs.get("name", ""), run.stdout


@pytest.mark.parametrize("tag", ["v1.2.3", "v1", "v1.3.0-rc.1"])
def test_the_workflow_pushes_the_name_action_yml_runs(tmp_path, tag):
    name, major = action_image().rsplit(":", 1)
    assert major == "v1"  # the parametrized tags are of this major
    code, pushed, _ = run_name_step(tmp_path, tag)
    assert code == 0 and pushed == name


def test_a_tag_of_another_major_than_action_yml_runs_is_refused_before_any_build(tmp_path):
    code, pushed, stdout = run_name_step(tmp_path, "v2.0.0")
    assert code == 1 and pushed == ""
    assert f"::error file=action.yml::action.yml runs {action_image()} but this tag is v2.0.0" in stdout


def test_an_action_yml_that_builds_its_dockerfile_is_refused(tmp_path):
    text = (ROOT / "action.yml").read_text().replace(ACTION["runs"]["image"], "Dockerfile")
    code, pushed, stdout = run_name_step(tmp_path, "v1.2.3", text)
    assert code == 1 and pushed == "" and "runs.image is not docker://NAME:vN" in stdout


def test_the_stack_builds_the_action_image_from_every_file_the_dockerfile_copies():
    copied = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith(("COPY ", "ADD ")):
            copied.update(line.split()[1:-1])
    covered = {path for path in copied if any(path == c or path.startswith(f"{c}/") for c in ACTION_CONTEXT)}
    assert copied and covered == copied
