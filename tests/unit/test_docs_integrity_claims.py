"""What the docs say of #48's refusals and rules, checked against the code that makes them: each
refusal's row in troubleshooting.md gives its exit code and the fix the message gives, and
how-it-works.md names the rule the code applies.

- a bumped folder written after the build (item 1): exit 1, no release commit or tag, and the
  advice the refusal prints (`git checkout HEAD -- <N>`, remove `<N+1>`, run again);
- a record or ledger giving a version another version's tree (item 2): exit 1, "git never held";
- a rewritten previous manifest (item 4): its pairing not reused, the daemon pushes, and the
  report's fields the row names are the report's;
- the auto-complete rule (item 5): every module the page lets a plain model import is one the
  check trusts, and every way it names as undecidable is one the check refuses to call plain.
"""

from __future__ import annotations

import re

import pytest

from support.models import PYTHON_MODEL, python_model_files
from support.stack import ROOT
from triton_release import steps
from triton_release.errors import Refused
from triton_release.history.commit import commit
from triton_release.models.config.completion import TRUSTED_IMPORTS, completes_its_config
from triton_release.registry import upload

TROUBLESHOOTING = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
HOW_IT_WORKS = " ".join((ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8").split())


def row(starting: str) -> list[str]:
    """The cells of the troubleshooting table's row whose situation starts with `starting`."""
    found = [line for line in TROUBLESHOOTING.splitlines() if line.startswith(f"| {starting}")]
    assert len(found) == 1, starting
    return [cell.strip() for cell in found[0].strip("|").split(" | ")]


def words(text: str) -> str:
    return " ".join(text.split())


def test_a_write_after_the_build_is_documented_as_the_refusal_says(git_repo):
    git_repo.write({**python_model_files("a"), **python_model_files("b")})
    base = git_repo.commit("release")
    git_repo.write({"a/1/model.py": "# 2\n" + PYTHON_MODEL})
    head = git_repo.commit("a: new code")
    bumped = steps.bump(git_repo.models, steps.changes(git_repo.models, base))
    git_repo.write({"a/2/model.py": "# saved meanwhile\n"})
    with pytest.raises(Refused) as refused:
        commit(git_repo.models, "1.1.0", bumped, head)
    message = words(str(refused.value))
    situation, exit_code, left = row("`commit: true`: a bumped version folder written after the image was built")
    assert exit_code.startswith(f"{Refused.exit_code},")
    assert "no release commit, no `vX.Y.Z` tag" in left and "No release commit and no git tag v1.1.0" in message
    assert "`git checkout HEAD -- <N>`" in left and "`git checkout HEAD -- model_repository/a/1`" in message
    assert "remove `<N+1>`" in left and "remove model_repository/a/2" in message
    assert "run again" in left and "run triton-release again" in message
    assert "`git checkout HEAD -- <N>`, remove `<N+1>`" in HOW_IT_WORKS


def test_a_version_given_another_versions_tree_is_documented_as_refused():
    situation, exit_code, left = row("the registry's released versions (`triton-release.versions`) or its ledger")
    assert "two versions swapped" in situation and exit_code.startswith("1,") and left == "nothing"
    assert '"git never held"' in exit_code
    assert "that very version folder held at the commit" in HOW_IT_WORKS
    assert "never the checkout of today" in HOW_IT_WORKS


def test_a_rewritten_previous_manifest_is_documented_with_the_reports_own_fields():
    situation, outcome, _ = row("the previous release's manifest rewritten in the registry")
    assert outcome.startswith("0:")
    fields = re.findall(r"`([a-z_.]+)`", outcome)
    assert "steps.push.pushed_by" in fields and "uploaded_during_tests.not_used_because" in fields
    assert "not_used_because" in upload.Uploaded(0, 0, 0).to_json()
    assert "the one the ledger confirmed" in outcome
    assert "the manifest the ledger confirmed for that release" in words(upload.__doc__ or "")


def test_the_reuse_rule_on_the_page_is_the_uploads():
    """how-it-works.md's rule for the blobs reused beside the tests, as registry/upload.py states
    it; tests/unit/registry/test_upload.py and tests/integration/test_upload_during_tests.py prove it."""
    said = HOW_IT_WORKS[HOW_IT_WORKS.index("the previous release's manifest names, reused only") :][:300]
    assert "byte for byte the one its push confirmed in the ledger" in said
    assert "a blob this machine uploaded before, only for a layer this build wrote, as the very blob" in said
    assert "digest and size, our gzip of it makes" in said
    doc = words(upload.__doc__ or "")
    assert "byte for byte the manifest the ledger confirmed" in doc
    assert "lends only to a layer this build wrote a tar of, and only the very blob (digest and size) our gzip" in doc


def test_the_auto_complete_rule_on_the_page_is_the_checks():
    said = HOW_IT_WORKS[HOW_IT_WORKS.index("no `locals()`") :][:400]
    assert "`triton_python_backend_utils`" in said and "numpy" in said
    assert {"numpy", "triton_python_backend_utils", "json", "os"} <= TRUSTED_IMPORTS
    for undecided in (
        "class TritonPythonModel:\n    locals()['x'] = 1\n",
        "import sys\nclass TritonPythonModel:\n    sys._getframe(0).f_locals.update({})\n",
        "import helper\nclass TritonPythonModel:\n    pass\n",
        "import builtins\nclass TritonPythonModel:\n    pass\n",
    ):
        assert completes_its_config(undecided.encode()), undecided
    assert "What the source cannot decide counts as completing" in HOW_IT_WORKS
