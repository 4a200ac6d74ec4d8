"""Shared fixtures."""

from __future__ import annotations

import pytest

from helpers import write_tree


@pytest.fixture
def make_repo(tmp_path):
    """make_repo({path: content}) -> a model repository folder; python_model_files() helps."""
    def make(files: dict[str, str | bytes | None]) -> Path:
        return write_tree(tmp_path / "model_repository", files)
    return make


@pytest.fixture
def git_repo(tmp_path):
    from helpers import GitRepo
    return GitRepo(tmp_path / "work")
