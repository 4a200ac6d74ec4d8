"""The docs site's hooks (docs/hooks.py): README.md's links rebased for the pages that include it,
a link whose text wraps onto the next line like any other, fenced code left as written."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def config():
    return SimpleNamespace(
        config_file_path=str(ROOT / "mkdocs.yml"), docs_dir=str(ROOT / "docs"), repo_url="https://github.com/org/x"
    )


def test_a_readme_link_into_the_docs_leads_to_the_page_from_the_home_page(hooks, config):
    text = "See [the stub](docs/image.md#the-stub)."
    assert hooks.rebase(text, ROOT, ROOT / "docs", config) == "See [the stub](image.md#the-stub)."


def test_a_link_whose_text_wraps_onto_the_next_line_is_rebased_too(hooks, config):
    text = "Which [Triton releases are proven\nhere and planned](docs/image.md#triton-releases) is said there."
    rebased = hooks.rebase(text, ROOT, ROOT / "docs", config)
    assert rebased == "Which [Triton releases are proven\nhere and planned](image.md#triton-releases) is said there."


def test_links_in_fenced_code_and_brackets_across_a_blank_line_are_left_as_written(hooks, config):
    fenced = "```\n[a](docs/image.md)\n```"
    assert hooks.rebase(fenced, ROOT, ROOT / "docs", config) == fenced
    paragraphs = "[not a link\n\nat all](docs/image.md)"
    assert hooks.rebase(paragraphs, ROOT, ROOT / "docs", config) == paragraphs


def test_a_file_outside_the_docs_leads_to_the_repository_page(hooks, config):
    text = "[the action](action.yml)"
    assert (
        hooks.rebase(text, ROOT, ROOT / "docs", config) == "[the action](https://github.com/org/x/blob/main/action.yml)"
    )
