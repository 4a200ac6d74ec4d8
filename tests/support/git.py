"""A git repository in a temporary folder, holding model_repository/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from support.models import write_tree


class GitRepo:
    """A git repository in a temporary folder, holding model_repository/."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.models = root / "model_repository"
        self.models.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "test@example.com")
        self.git("config", "user.name", "test")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", *args], cwd=self.root, check=True, capture_output=True, text=True).stdout.strip()

    def write(self, files: dict) -> None:
        write_tree(self.models, files)

    def remove(self, *paths: str) -> None:
        for rel in paths:
            path = self.models / rel
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")
