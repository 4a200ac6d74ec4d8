"""The image holds exactly the committed files: what `git archive` would drop (export-ignore) or
rewrite (export-subst) is written as committed, executables and links as git keeps them."""

from __future__ import annotations

import os

from support.models import python_model_files
from triton_release import steps


def test_an_export_holds_every_committed_file_byte_for_byte_whatever_the_attributes(git_repo, tmp_path):
    git_repo.write(
        {
            **python_model_files("a"),
            "a/1/weights.bin": b"\x00\x01weights",
            "a/1/version.txt": "$Format:%H$\n",
            "a/1/run.sh": "#!/bin/sh\n",
        }
    )
    (git_repo.root / ".gitattributes").write_text("*.bin export-ignore\nversion.txt export-subst\n")
    os.symlink("weights.bin", git_repo.models / "a" / "1" / "link.bin")
    (git_repo.models / "a" / "1" / "run.sh").chmod(0o755)
    git_repo.commit("a model with archive attributes")
    planned = steps.changes(git_repo.models, None)
    shipped = steps.export(git_repo.models, planned, tmp_path / "export")
    assert not shipped.in_place  # attributes that convert: unpacked, never trusted in place
    folder = shipped.root / "a" / "1"
    assert (folder / "weights.bin").read_bytes() == b"\x00\x01weights"
    assert (folder / "version.txt").read_text() == "$Format:%H$\n"
    assert os.readlink(folder / "link.bin") == "weights.bin"
    assert os.stat(folder / "run.sh").st_mode & 0o111
    assert not os.stat(folder / "model.py").st_mode & 0o111
