"""What a release leaves on the Docker daemon (image/tidy.py), without Docker: the result, how it
is shown, and that the docs name what the report holds. The removals themselves are checked on the
real daemon (tests/integration/test_daemon_tidy.py)."""

from __future__ import annotations

import io

from support.stack import ROOT
from triton_release.console import Console
from triton_release.image.build import BuildResult
from triton_release.image.tidy import Tidied


def test_results_add_up_and_keep_the_kept_tag():
    found = Tidied(kept="r/m:candidate") + Tidied(untagged=("r/m:1.0.0",)) + Tidied(removed=("sha256:ab",))
    assert found == Tidied(("r/m:1.0.0",), ("sha256:ab",), (), "r/m:candidate")
    assert Tidied(left=(("sha256:cd", "used by a container"),)).to_json()["left"] == [
        {"image": "sha256:cd", "because": "used by a container"}
    ]


def test_the_console_says_what_went_what_stayed_for_the_next_build_and_what_was_left():
    out = io.StringIO()
    Console(out=out, err=out).tidied(
        Tidied(("r/m:1.0.0",), ("sha256:" + "a" * 64,), (("sha256:" + "b" * 64, "still tagged x:y"),), "r/m:candidate")
    )
    lines = out.getvalue().splitlines()
    assert any("removed r/m:1.0.0, sha256:aaaaaaaaaaaa" in line and "kept r/m:candidate" in line for line in lines)
    assert any("left sha256:bbbb" in line and "still tagged x:y" in line for line in lines)


def test_the_docs_name_what_the_report_holds():
    page = (ROOT / "docs" / "how-it-works.md").read_text()
    [tidy] = [part for part in page.split("\n7. ") if part.startswith("**tidy**")]
    for key in Tidied().to_json():
        assert f"`{key}`" in tidy, key
    assert "`steps.tidy`" in tidy and "`steps.build.replaced`" in tidy and "`REPO:candidate`" in tidy
    assert "never by a prune" in tidy
    assert "replaced" in BuildResult("t", "i", "b", ()).to_json()
    assert "(`build.replaced`)" in (ROOT / "docs" / "image.md").read_text()
