"""The project root and the names of the local stack (`make stack`): its base image and registry."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE_IMAGE = "local/tritonserver:24.10-py3"
REGISTRY = "127.0.0.1:5000"
