"""Every ```yaml block of README.md and docs/*.md is tested, by what it is.

- A whole workflow (`on:` and `jobs:`) is one of the example workflows in .github/workflows/, key
  for key (comments aside). This repository is the action, so its workflows say `uses: ./` where a
  user's say `uses: org/triton-release@v1`; that one difference is all that is allowed.
- A step, or a list of steps, that uses the action gives it only inputs action.yml declares.
- triton-release.yaml settings load through the project's own settings loader.
- Anything else must be marked `<!-- snippet: fragment -->` on the line before its fence; it is
  then only parsed.
Every block must parse with PyYAML.
"""

from __future__ import annotations

import re

import pytest
import yaml

from support.docs import Block, yaml_blocks
from support.stack import ROOT
from triton_release.errors import UsageError
from triton_release.settings import BY_KEY, DEPRECATED, read_config_file, resolve

ACTION = yaml.safe_load((ROOT / "action.yml").read_text())
INPUTS = set(ACTION["inputs"])
# docker://ghcr.io/OWNER/triton-release:vN: the action a user names OWNER/triton-release@vN
PUBLISHED = re.fullmatch(
    r"docker://(?P<image>[^/]+/(?P<owner>[^/]+)/(?P<name>[^:@]+)):(?P<major>v\d+)", ACTION["runs"]["image"]
)
assert PUBLISHED, f"action.yml's runs.image {ACTION['runs']['image']!r} is not docker://HOST/OWNER/NAME:vN"
ACTION_REF = f"{PUBLISHED['owner']}/{PUBLISHED['name']}"  # org/triton-release
USES = f"{ACTION_REF}@{PUBLISHED['major']}"  # org/triton-release@v1
DOCKER_WITH = {"entrypoint", "args"}  # what `with:` passes to a `uses: docker://...` step besides inputs

WORKFLOW_FILES = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKS = {"fragment"}


BLOCKS = [block for page in PAGES for block in yaml_blocks(page)]


def is_workflow(data) -> bool:
    return isinstance(data, dict) and "jobs" in data and ("on" in data or True in data)  # YAML 1.1: `on` is true


def steps_of(data) -> list[dict] | None:
    """The steps a block holds: a list of steps, or one step; None when it is not steps."""
    items = data if isinstance(data, list) else [data]
    if items and all(isinstance(s, dict) and ("uses" in s or "run" in s) for s in items):
        return items
    return None


def is_settings(data) -> bool:
    return isinstance(data, dict) and any(key in BY_KEY or key in DEPRECATED for key in data)


def kind(block: Block, data) -> str:
    if block.mark:
        return block.mark
    if is_workflow(data):
        return "workflow"
    if steps_of(data) is not None:
        return "steps"
    if is_settings(data):
        return "settings"
    return "unknown"


def uses_the_action(step: dict) -> bool:
    uses = str(step.get("uses", ""))
    return (
        uses == "./"
        or uses.startswith(f"{ACTION_REF}@")
        or uses.startswith(f"docker://{PUBLISHED['image']}@")
        or uses.startswith(f"docker://{PUBLISHED['image']}:")
    )


def undeclared_inputs(steps: list[dict]) -> list[str]:
    found = []
    for step in steps:
        if not uses_the_action(step):
            continue
        allowed = INPUTS | (DOCKER_WITH if str(step["uses"]).startswith("docker://") else set())
        found += [f"{step.get('id') or step['uses']}: {name}" for name in step.get("with") or {} if name not in allowed]
    return found


def all_steps(workflow: dict) -> list[dict]:
    return [step for job in (workflow.get("jobs") or {}).values() for step in job.get("steps") or ()]


def as_users_write_it(node):
    """A workflow of this repository as a user's says it: `uses: ./` is the published action."""
    if isinstance(node, dict):
        return {
            key: (USES if key == "uses" and value == "./" else as_users_write_it(value)) for key, value in node.items()
        }
    if isinstance(node, list):
        return [as_users_write_it(item) for item in node]
    return node


WORKFLOWS = {path.name: yaml.safe_load(path.read_text()) for path in WORKFLOW_FILES}
AS_USERS_WRITE_THEM = {name: as_users_write_it(workflow) for name, workflow in WORKFLOWS.items()}


def test_the_pages_hold_yaml_blocks_and_every_mark_is_known():
    assert any(b.page.name == "README.md" for b in BLOCKS), "README.md has no ```yaml block: where is the quick start?"
    unknown = [f"{b.where}: <!-- snippet: {b.mark} -->" for b in BLOCKS if b.mark and b.mark not in MARKS]
    assert not unknown, f"unknown snippet marks (known: {', '.join(sorted(MARKS))}): {unknown}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_every_yaml_block_is_tested_as_what_it_is(block, tmp_path):
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as exc:
        pytest.fail(f"{block.where}: not valid YAML: {exc}", pytrace=False)
    found = kind(block, data)
    if found == "fragment":
        return
    if found == "workflow":
        matches = [name for name, workflow in AS_USERS_WRITE_THEM.items() if workflow == data]
        assert matches, (
            f"{block.where}: a whole workflow that is none of .github/workflows/ "
            f"({', '.join(WORKFLOWS)}): make it one of them, key for key (with `uses: {USES}` where "
            "the file says `uses: ./`)"
        )
        assert not undeclared_inputs(all_steps(data)), f"{block.where}: inputs action.yml does not declare"
    elif found == "steps":
        wrong = undeclared_inputs(steps_of(data))
        assert not wrong, f"{block.where}: inputs action.yml does not declare: {wrong}"
        for step in steps_of(data):
            uses = str(step.get("uses", ""))
            if uses.startswith(f"{ACTION_REF}@v"):
                assert uses == USES, f"{block.where}: `uses: {uses}`, but action.yml runs major {PUBLISHED['major']}"
    elif found == "settings":
        path = tmp_path / "triton-release.yaml"
        path.write_text(block.text, encoding="utf-8")
        try:
            read_config_file(path)
            resolve({}, config_file=str(path), cwd=tmp_path)
        except UsageError as exc:
            pytest.fail(f"{block.where}: the settings loader refuses this triton-release.yaml: {exc}", pytrace=False)
    else:
        pytest.fail(
            f"{block.where}: this ```yaml block is not a whole workflow, a step, nor triton-release.yaml "
            "settings; if it is a fragment, put `<!-- snippet: fragment -->` on the line before it",
            pytrace=False,
        )


def test_the_quick_start_is_the_first_section_and_its_workflow_is_release_yml():
    readme = (ROOT / "README.md").read_text()
    sections = re.findall(r"^## (.+)$", readme, re.M)
    assert sections and sections[0] == "Quick start", f"the README's first section is {sections[:1]}, not Quick start"
    first = next(b for b in BLOCKS if b.page.name == "README.md")
    quick_start_ends = readme.index("\n## ", readme.index("## Quick start")) + 1  # the next section
    assert first.line <= readme[:quick_start_ends].count("\n"), (
        "the README's first ```yaml block is not in its quick start"
    )
    assert yaml.safe_load(first.text) == AS_USERS_WRITE_THEM["release.yml"], (
        f"{first.where}: the quick start's workflow differs from .github/workflows/release.yml, which the "
        "end-to-end tests run under act"
    )
    assert f"uses: {USES}" in first.text


@pytest.mark.parametrize("name", sorted(WORKFLOWS))
def test_the_example_workflows_give_the_action_only_inputs_it_declares(name):
    assert not undeclared_inputs(all_steps(WORKFLOWS[name])), f".github/workflows/{name}"


def test_the_checks_catch_what_they_are_for(tmp_path):
    """The classifier and the checks, on blocks that are wrong on purpose."""

    def block(text: str, mark: str | None = None) -> tuple[Block, object]:
        return Block(ROOT / "README.md", 1, text, mark), yaml.safe_load(text)

    wrong_step = f"- uses: {USES}\n  with:\n    repositroy: ghcr.io/a/b\n"
    assert kind(*block(wrong_step)) == "steps" and undeclared_inputs(yaml.safe_load(wrong_step)) == [
        f"{USES}: repositroy"
    ]
    docker = f"uses: docker://{PUBLISHED['image']}@sha256:{'0' * 64}\nwith:\n  entrypoint: x\n  mode: test\n"
    assert kind(*block(docker)) == "steps" and undeclared_inputs([yaml.safe_load(docker)]) == []
    assert kind(*block("model_repository: models\nbase_imag: x\n")) == "settings"
    path = tmp_path / "triton-release.yaml"
    path.write_text("model_repository: models\nbase_imag: x\n")
    with pytest.raises(UsageError, match="Did you mean 'base_image'"):
        read_config_file(path)
    assert kind(*block("runs-on: x\n")) == "unknown"
    assert kind(*block("runs-on: x\n", "fragment")) == "fragment"
    release = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert is_workflow(release) and as_users_write_it(release) != release  # it says `uses: ./`
    changed = as_users_write_it(release)
    changed["concurrency"]["cancel-in-progress"] = True
    assert changed not in AS_USERS_WRITE_THEM.values()
