"""The sample outputs docs/cli.md shows for `validate` and `changed` are the tool's own output on
the bundled example: each block's commands are run on a copy of model_repository/ in a git
repository, changed as the page says, and what they print is the block's text.

- validate: add_sub's config.pbtxt with TYPE_FP33 on line 8, preprocess given a golden case
  whose RAW is [1, 5], and score's version folder named 01.
- changed: preprocess's model.py changed after the release v1.0.0 (pipeline is the ensemble
  that uses it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from support.stack import ROOT
from support.tool import tool_command

PAGE = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
BAD_CASE = '{"inputs": [{"name": "RAW", "datatype": "FP32", "shape": [1, 5], "data": [1, 2, 3, 4, 5]}]}\n'


def block(first_command: str) -> list[tuple[str, list[str]]]:
    """The fenced block starting with `$ first_command`: each command and the lines it prints."""
    found = re.search(rf"```\n(\$ {re.escape(first_command)}\n.*?)```", PAGE, re.S)
    assert found, f"docs/cli.md has no sample starting with $ {first_command}"
    runs: list[tuple[str, list[str]]] = []
    for line in found.group(1).splitlines():
        if line.startswith("$ "):
            runs.append((line[2:], []))
        else:
            runs[-1][1].append(line)
    return runs


def git(root, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=docs", "-c", "user.email=docs@example.com", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def example(tmp_path):
    root = tmp_path / "work"
    shutil.copytree(ROOT / "model_repository", root / "model_repository")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the example models")
    return root


def printed(root, command: str) -> list[str]:
    assert command.startswith("triton-release ")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRITON_RELEASE_CACHE": str(root.parent / "cache")}
    env.pop("GITHUB_ACTIONS", None)
    done = subprocess.run(
        tool_command(*command.split()[1:]),
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    return done.stdout.splitlines()


def test_the_validate_sample_is_what_validate_prints(tmp_path):
    root = example(tmp_path)
    config = root / "model_repository" / "add_sub" / "config.pbtxt"
    lines = config.read_text().splitlines()
    assert lines[7].strip() == "data_type: TYPE_FP32"
    lines[7] = lines[7].replace("TYPE_FP32", "TYPE_FP33")
    config.write_text("\n".join(lines) + "\n")
    (root / "model_repository" / "preprocess" / "golden" / "bad.json").write_text(BAD_CASE)
    (root / "model_repository" / "score" / "1").rename(root / "model_repository" / "score" / "01")
    [(command, expected)] = block("triton-release validate")
    assert printed(root, command) == expected


def test_the_changed_sample_is_what_changed_prints(tmp_path):
    root = example(tmp_path)
    git(root, "tag", "v1.0.0")
    model = root / "model_repository" / "preprocess" / "1" / "model.py"
    model.write_text(model.read_text() + "# scaled differently\n")
    git(root, "commit", "-q", "-am", "preprocess: scaled differently")
    for command, expected in block("triton-release changed --base v1.0.0"):
        assert printed(root, command) == expected, command
