"""Every flag of every command is in docs/cli.md itself, not only in the generated reference:
a reader of the command page meets each one, with a link to where it is explained."""

from __future__ import annotations

import re

from support.stack import ROOT
from triton_release.cli.main import parser

PAGE = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
# the fan-out commands' own flags are on their page, which cli.md's table links to
ELSEWHERE = {"stage": "fan-out.md", "promote": "fan-out.md"}


def test_every_flag_is_on_the_command_page_or_its_commands_page():
    missing = []
    for name, command in parser().commands.items():
        for action in command._actions:
            for flag in action.option_strings:
                if not flag.startswith("--") or flag == "--help":
                    continue
                pattern = re.escape(flag) + r"(?![\w-])"
                pages = [PAGE] + (
                    [(ROOT / "docs" / ELSEWHERE[name]).read_text(encoding="utf-8")] if name in ELSEWHERE else []
                )
                if not any(re.search(pattern, page) for page in pages):
                    missing.append(f"{name} {flag}")
    assert not missing, "flags only in the reference: " + ", ".join(missing)


def test_no_push_commit_turns_off_the_files_push_commit(tmp_path):
    from triton_release.cli.common import given_settings
    from triton_release.settings import resolve

    (tmp_path / "triton-release.yaml").write_text("push_commit: true\n")
    config = str(tmp_path / "triton-release.yaml")
    for argv, expected in ((["--commit"], True), (["--commit", "--no-push-commit"], False)):
        args = parser().parse_args(["release", "--to", "127.0.0.1:5000/a/b", *argv])
        assert resolve(given_settings(args), config).push_commit is expected
