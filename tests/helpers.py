"""Test helpers: small model repositories written from a few lines of data, shared constants."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from bench.generate import MODEL_PY

PYTHON_MODEL = MODEL_PY.format(offset=1)  # adds 1 to INPUT0 (FP32) into OUTPUT0


def python_config(name: str, max_batch_size: int = 8, dims: str = "[ 4 ]", dtype: str = "TYPE_FP32") -> str:
    return textwrap.dedent(f'''\
        name: "{name}"
        backend: "python"
        max_batch_size: {max_batch_size}
        input [ {{ name: "INPUT0" data_type: {dtype} dims: {dims} }} ]
        output [ {{ name: "OUTPUT0" data_type: {dtype} dims: {dims} }} ]
        ''')


def golden_case(shape=(1, 4), data=(1, 2, 3, 4), out=(2, 3, 4, 5), dtype="FP32", **extra) -> str:
    case = {"inputs": [{"name": "INPUT0", "datatype": dtype, "shape": list(shape), "data": list(data)}],
            "outputs": [{"name": "OUTPUT0", "datatype": dtype, "shape": list(shape), "data": list(out)}], **extra}
    return json.dumps(case, indent=2)


def write_tree(root: Path, files: dict[str, str | bytes | None]) -> Path:
    """Write {relative path: content}; None makes an empty folder."""
    for rel, content in files.items():
        path = root / rel
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


def python_model_files(name: str, **config) -> dict[str, str]:
    return {
        f"{name}/config.pbtxt": python_config(name, **config),
        f"{name}/1/model.py": PYTHON_MODEL,
        f"{name}/golden/basic.json": golden_case(),
    }



ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "local/tritonserver:24.10-py3"
REGISTRY = "127.0.0.1:5000"

PYTHON_MODEL_RAISING = '''\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("weights file is missing: put weights.npy in the version folder")

    def execute(self, requests):
        return []
'''


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
        import subprocess
        return subprocess.run(["git", *args], cwd=self.root, check=True, capture_output=True, text=True).stdout.strip()

    def write(self, files: dict) -> None:
        write_tree(self.models, files)

    def remove(self, *paths: str) -> None:
        import shutil
        for rel in paths:
            path = self.models / rel
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

DECOUPLED_MODEL = '''\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Sends COUNT responses, 0, 1, ... COUNT-1, then the final flag."""

    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for i in range(count):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

DECOUPLED_CONFIG = '''\
name: "counter"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
'''

SLEEPY_MODEL = '''\
import time


class TritonPythonModel:
    def initialize(self, args):
        time.sleep(600)

    def execute(self, requests):
        return []
'''


class LocalRegistry:
    """A private docker-registry process on a free loopback port (optionally with basic auth),
    for the tests that stop a registry or need a password."""

    def __init__(self, state: Path, user: tuple[str, str] | None = None) -> None:
        import socket

        import bcrypt
        self.state = state
        state.mkdir(parents=True, exist_ok=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{sock.getsockname()[1]}"
        auth = ""
        if user:
            digest = bcrypt.hashpw(user[1].encode(), bcrypt.gensalt(5)).decode()
            (state / "htpasswd").write_text(f"{user[0]}:{digest}\n")
            auth = f"auth:\n  htpasswd:\n    realm: test\n    path: {state / 'htpasswd'}\n"
        (state / "config.yml").write_text(
            "version: 0.1\nlog:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {state / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.address}\n{auth}")
        self.process = None
        self.start()

    def start(self) -> None:
        import subprocess
        import time

        import requests
        self.process = subprocess.Popen(["docker-registry", "serve", str(self.state / "config.yml")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                requests.get(f"http://{self.address}/v2/", timeout=1)
                return
            except requests.RequestException:
                time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not start on {self.address}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None
