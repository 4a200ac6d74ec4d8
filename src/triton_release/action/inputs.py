"""The action's inputs, typed and checked, and the event they arrive with.

GitHub passes inputs as INPUT_<NAME> variables (name upper-cased, hyphens kept) and the event
as a JSON file at $GITHUB_EVENT_PATH. Both are read from the environment handed in.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from triton_release.errors import UsageError

MODES = ("release", "test", "rollback", "stage", "promote", "doctor")
TRUE, FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off", ""}
# inputs that are settings (`image`: the old name of `repository`)
SETTING_INPUTS = (
    "model-repository",
    "repository",
    "image",
    "registry-ca",
    "base-image",
    "python",
    "stub",
    "stub-sources",
    "channel",
    "keep",
    "load-timeout",
    "max-loaded",
    "gpus",
    "gpu-models",
    "max-drift",
    "push-commit",
    "upload-during-tests",
    "tags",
    "max-latency-increase",
    "measure-latency",
    "latency-unmeasured",
    "latency-rounds",
    "warmup",
    "signing",
)


# Where the action's default is not the setting's, on purpose: an input left empty falls back to
# triton-release.yaml, then to these. In a workflow, `commit: true` is lost with the runner unless
# the commit is pushed, so the action pushes it back unless the input or the file says false.
SETTING_DEFAULTS = {"push_commit": True}


def _flag(name: str, text: str) -> bool | None:
    value = text.strip().lower()
    if value in TRUE:
        return True
    if value in FALSE:
        return False if value else None
    raise UsageError(f"the action's input {name} is {text!r}; give true or false.")


def _count(name: str, text: str) -> int | None:
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"the action's input {name} is {text!r}; give a whole number.") from None


@dataclass(frozen=True)
class Event:
    name: str
    payload: dict

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Event:
        try:
            payload = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text())
        except (KeyError, OSError, ValueError):
            payload = {}
        return cls(env.get("GITHUB_EVENT_NAME", ""), payload if isinstance(payload, dict) else {})

    @property
    def is_pull_request(self) -> bool:
        return self.name in ("pull_request", "pull_request_target")

    @property
    def base(self) -> str | None:
        """A pull request's base sha; None otherwise: the last release (its vX.Y.Z git tag, else its
        image's revision), so a change whose release failed is released by the next push, which a
        push's `before` would miss. No release yet: a first release of every model."""
        if self.is_pull_request:
            return (self.payload.get("pull_request") or {}).get("base", {}).get("sha")
        return None


@dataclass(frozen=True)
class ActionInputs:
    mode: str
    settings: dict  # inputs that are settings (empty ones left to triton-release.yaml)
    username: str
    password: str
    push: bool | None  # None: by event
    commit: bool
    base_ref: str
    rollback_to: str
    verify: bool
    report: str
    candidate: str = ""  # stage's output REPO@sha256:...: mode test tests it, mode promote tags it
    shard: str = ""  # mode test of a candidate: the shard whose record it writes
    models: str = ""  # mode test of a candidate: a,b (default: the shard's, from the candidate)
    shards: int | None = None  # mode stage: this many shards ...
    max_models_per_shard: int | None = None  # ... or as many as hold at most this many models
    version: str = ""  # mode promote: the release X.Y.Z (the stage job's version output)
    signing_key: str = field(default="", repr=False)  # the PEM itself (a secret): written to a 0600 file, masked
    verify_key: str = ""  # a PEM public key, or the path of one in the workspace

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ActionInputs:
        def value(name: str) -> str:
            return env.get(f"INPUT_{name.upper()}", "").strip()

        mode = value("mode") or "release"
        if mode not in MODES:
            raise UsageError(f"the action's input mode is {mode!r}; give one of {', '.join(MODES)}.")
        settings = {name.replace("-", "_"): value(name) for name in SETTING_INPUTS if value(name)}
        return cls(
            mode,
            settings,
            value("username"),
            value("password"),
            _flag("push", value("push")),
            bool(_flag("commit", value("commit"))),
            value("base-ref"),
            value("rollback-to"),
            bool(_flag("verify", value("verify"))),
            value("report") or "triton-release-report.json",
            candidate=value("candidate"),
            shard=value("shard"),
            models=value("models"),
            shards=_count("shards", value("shards")),
            max_models_per_shard=_count("max-models-per-shard", value("max-models-per-shard")),
            version=value("version"),
            signing_key=value("signing-key"),
            verify_key=value("verify-key"),
        )

    def pushes(self, event: Event) -> bool:
        """mode test never pushes (a candidate's test writes only its record); else the push input,
        else: not on pull requests."""
        if self.mode == "test":
            return False
        return self.push if self.push is not None else not event.is_pull_request


@contextmanager
def key_files(inputs: ActionInputs, env: Mapping[str, str]) -> Iterator[dict]:
    """The signing-key input (a PEM from a secret) in a file only this user can read, and the
    verify-key input when it is a PEM rather than a path: the settings they make. The files are
    removed when the run ends; the key's text is never printed (main masks it first)."""
    made: list[str] = []
    keys: dict = {}
    folder = env.get("RUNNER_TEMP") or None
    try:
        for name, text in (("signing_key", inputs.signing_key), ("verify_key", inputs.verify_key)):
            if not text:
                continue
            if name == "verify_key" and not text.startswith("-----BEGIN"):
                keys[name] = text  # a path in the workspace
                continue
            descriptor, path = tempfile.mkstemp(
                prefix="triton-release-", suffix=".pem", dir=folder if folder and os.path.isdir(folder) else None
            )
            made.append(path)
            os.close(descriptor)  # mkstemp made it for this user only (0600); the text kept out of any log
            Path(path).write_text(text.strip() + "\n", encoding="utf-8")
            keys[name] = path
        yield keys
    finally:
        for path in made:
            with suppress(OSError):
                os.unlink(path)
