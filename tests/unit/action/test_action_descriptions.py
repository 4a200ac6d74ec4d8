"""What action.yml and docs/action.md say about the action's image and its inputs, checked against
what builds the image and what the modes do."""

from __future__ import annotations

import inspect

import yaml

from support.stack import ROOT
from triton_release.fanout import promote

ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
IMAGE_WORKFLOW = yaml.safe_load((ROOT / ".github" / "workflows" / "action-image.yml").read_text(encoding="utf-8"))


def test_the_platform_stated_is_the_one_the_image_is_built_for():
    built = [
        step["with"]["platforms"]
        for job in IMAGE_WORKFLOW["jobs"].values()
        for step in job["steps"]
        if "platforms" in (step.get("with") or {})
    ]
    assert built == ["linux/amd64"]
    assert "linux/amd64" in ACTION["description"]
    assert "for `linux/amd64` only" in (ROOT / "docs" / "action.md").read_text(encoding="utf-8")


def test_push_commit_says_promote_never_pushes_and_promote_does_not():
    described = " ".join(ACTION["inputs"]["push-commit"]["description"].split())
    assert "Mode promote (with commit: true) commits and tags but never pushes" in described
    source = inspect.getsource(promote)
    assert "push_commit" not in source and "push_release" not in source
