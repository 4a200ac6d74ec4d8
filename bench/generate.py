"""Generated model repositories of any size, in the shape of the example's add-one model."""

from __future__ import annotations

import json
import os
from pathlib import Path

# The add-one model, {offset} to fill in. One copy, shared with the tests and read as text, so
# that neither bench nor tests imports the other.
MODEL_PY = (Path(__file__).resolve().parents[1] / "tests" / "support" / "add_one_model.py.tmpl").read_text()

# The add-one model's config, {name} to fill in (bench/latency.py's models share it).
ADD_ONE_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""
CONFIG = ADD_ONE_CONFIG + "instance_group [ {{ kind: KIND_CPU count: 1 }} ]\n"


def write_model(root: Path, name: str, offset: int = 1, weights_bytes: int = 0) -> None:
    version = root / name / "1"
    version.mkdir(parents=True, exist_ok=True)
    (root / name / "config.pbtxt").write_text(CONFIG.format(name=name))
    (version / "model.py").write_text(MODEL_PY.format(offset=offset))
    if weights_bytes:
        (version / "weights.bin").write_bytes(os.urandom(weights_bytes))
    golden = root / name / "golden"
    golden.mkdir(exist_ok=True)
    data = [1.0, 2.0, 3.0, 4.0]
    case = {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": data}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4], "data": [d + offset for d in data]}],
    }
    (golden / "basic.json").write_text(json.dumps(case))


def generate_repository(root: Path, n: int, weights_bytes: int = 0) -> Path:
    for i in range(n):
        write_model(root, f"model_{i:04d}", offset=i % 7 + 1, weights_bytes=weights_bytes)
    return root


def git(root: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def generate_history(root: Path, n_models: int, n_commits: int) -> tuple[str, str]:
    """A git repository of n_models models and n_commits commits, each editing one model's
    highest version. Returns (first commit, head)."""
    models = root / "model_repository"
    generate_repository(models, n_models)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "bench@example.com")
    git(root, "config", "user.name", "bench")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    first = git(root, "rev-parse", "HEAD")
    # One fast-import stream for the many small commits.
    import subprocess

    lines = []
    for i in range(1, n_commits):
        name = f"model_{i % n_models:04d}"
        body = MODEL_PY.format(offset=1) + f"# edit {i}\n"
        data = body.encode()
        lines.append(b"commit refs/heads/main\n")
        lines.append(f"committer bench <bench@example.com> {1700000000 + i} +0000\n".encode())
        message = f"edit {name}".encode()
        lines.append(b"data %d\n%s\n" % (len(message), message))
        if i == 1:
            lines.append(f"from {first}\n".encode())
        lines.append(f"M 100644 inline model_repository/{name}/1/model.py\n".encode())
        lines.append(b"data %d\n%s\n" % (len(data), data))
    subprocess.run(["git", "fast-import", "--quiet"], cwd=root, input=b"".join(lines), check=True)
    git(root, "reset", "-q", "--hard", "main")
    return first, git(root, "rev-parse", "HEAD")
