"""A model that completes its config through auto_complete_config, with a partial config.pbtxt:
the two lines validate's own advice gives a BLS caller (declare the models it calls) are not read
as the whole config. Its golden cases are not held to tensors the config leaves to the model, the
missing backend is Triton's python (from model.py), and following the advice as printed passes."""

from __future__ import annotations

import json
import re

from support.bls import completing_caller_files
from support.models import python_model_files
from triton_release.cli import main


def validated(root, tmp_path, capsys) -> tuple[int, str, dict]:
    report = tmp_path / "report.json"
    code = main(["validate", "--model-repository", str(root), "--report", str(report)])
    out = capsys.readouterr()
    return code, out.out + out.err, json.loads(report.read_text())["steps"]["validate"]


def follow_the_advice(root, warning: str, callee: str) -> None:
    """Write what the warning says to write, where it says, naming the model called."""
    found = re.search(r"Declare the models it calls in (\S+): (parameters \{.*\})", warning)
    assert found, warning
    path, text = found.groups()
    path = path if path.startswith("/") else str(root.parent / path)
    with open(path, "a") as config:
        config.write(text.replace("model_a,model_b", callee) + "\n")


def test_following_validates_advice_for_a_completing_bls_caller_passes(make_repo, tmp_path, capsys, monkeypatch):
    root = make_repo({**completing_caller_files("caller", "a"), **python_model_files("a")})
    monkeypatch.chdir(root.parent)
    code, printed, found = validated(root, tmp_path, capsys)
    assert code == 0, printed
    [advice] = [w["message"] for w in found["warnings"] if "Declare the models it calls" in w["message"]]
    follow_the_advice(root, advice, "a")
    assert (root / "caller/config.pbtxt").read_text().count("\n") == 1  # the whole config: one line
    code, printed, found = validated(root, tmp_path, capsys)
    assert code == 0, printed
    assert not found["problems"] and not any("computed at run time" in w["message"] for w in found["warnings"])
