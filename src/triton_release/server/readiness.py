"""A running tritonserver's models as its HTTP API tells them: the repository index
(`ModelState`), each model's config and readiness, and the wait until they are ready
(`wait_ready`). The wait fails at once, never at --load-timeout, when a model failed to load or
never will (its version excluded, its stub unable to start), and when the server exited or was
killed; each failure names the model with its lines from the server's log. (Loading and
unloading models: server/model_control.py.)"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import requests

from triton_release import progress
from triton_release.errors import InfrastructureError, Refused
from triton_release.signals import checkpoint

if TYPE_CHECKING:
    from docker.models.containers import Container

# Between two looks at the server while waiting for it: a python model loads in about 1.5 s, and a
# look costs the daemon's and the server's answers of a few milliseconds.
POLL_SECONDS = 0.1


def poll_seconds(pending: int) -> float:
    """Between two looks while `pending` models load: a look is one request for the repository
    index, whose answer grows with the models (a few milliseconds at a thousand), so a wave of
    many looks a little less often (up to 0.2 s); one model is looked at every 0.1 s."""
    return min(0.2, POLL_SECONDS + 0.001 * max(0, pending - 1))


def ready_among(pending: dict[str, int | None], states: list[ModelState], held: Collection[str] = ()) -> list[str]:
    """The models of `pending` (name -> version, None: any) that the repository index `states`
    lists READY at their version, in `pending`'s order; none of `held` (a paired model whose load
    has not answered yet: its previous version may fail and the model load again alone)."""
    ready = {(s.name, s.version) for s in states if s.state == "READY"}
    names = {name for name, _ in ready}
    return [
        name
        for name, version in pending.items()
        if name not in held and (name in names if version is None else (name, str(version)) in ready)
    ]


# Lines after which no model of this server will ever load: fail now, not at --load-timeout.
FATAL_LOG_LINES = ("error while loading shared libraries",)
UNLOADED = "unloaded"  # the repository index's reason for a model unloaded on request
# The words every failed load's reason starts with: the request's, and Triton's status code.
_LOAD_FAILED = re.compile(
    r"^(load failed for model '[^']*': )?(version \d+ is at UNAVAILABLE state: )?"
    r"((Internal|Invalid argument|Unavailable|Unknown|Not found|Already exists): )?"
)


# A line of `docker logs --timestamps`: the daemon's RFC 3339 time (nanoseconds), then the line.
_STAMPED = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<fraction>\d+))?Z (?P<line>.*)$")


def logged_load_seconds(log: str) -> float | None:
    """From a server's log with the daemon's timestamps: the seconds from its first "loading:" line
    (tritonserver starts loading a model) to its last "successfully loaded" one; None when the log
    shows no such pair. Triton flushes each line, so the daemon stamps it as it is written."""
    first = last = None
    for text in log.splitlines():
        found = _STAMPED.match(text)
        if found is None:
            continue
        line = found["line"]
        if "loading: " not in line and "successfully loaded '" not in line:
            continue
        at = datetime.strptime(found["at"], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp() + float(
            f"0.{found['fraction'] or 0}"
        )
        if "loading: " in line and first is None:
            first = at
        elif "successfully loaded '" in line:
            last = at
    return last - first if first is not None and last is not None and last >= first else None


@dataclass(frozen=True)
class ModelState:
    name: str
    version: str
    state: str
    reason: str


class Readiness:
    """The readiness of the models of the server at `http_url`, in the container `container`, and
    the failures that stop waiting for it (set by TritonServer)."""

    wave = ""  # "wave 2 of 3" while a wave loads (set by run_waves), shown with the progress
    image: str
    name: str
    http_url: str
    container: Container | None
    models: dict[str, int | None]
    overrides: dict[str, str]
    gpu_models: str
    unloadable: dict[str, str]
    paired: dict[str, str]
    completed: dict[str, dict]
    load_timeout: float
    logs: Callable[[], str]

    def _get(self, path: str) -> requests.Response | None:
        try:
            return requests.get(f"http://{self.http_url}{path}", timeout=2)
        except requests.RequestException:
            return None

    def index(self) -> list[ModelState]:
        try:
            answer = requests.post(f"http://{self.http_url}/v2/repository/index", json={}, timeout=5)
            answer.raise_for_status()
            listed = answer.json()
            return [
                ModelState(str(m["name"]), str(m.get("version", "")), m.get("state", ""), m.get("reason", ""))
                for m in listed
            ]
        except (requests.RequestException, ValueError, KeyError, TypeError):  # not an index: none yet
            return []

    def read_configs(self, names: list[str]) -> None:
        """Keep the configs of `names` as the server has them (an auto-complete model's signature
        exists nowhere else); one it does not give is left out."""
        for name in names:
            answer = self._get(f"/v2/models/{name}/config")
            try:
                config = answer.json() if answer is not None and answer.status_code == 200 else None
            except ValueError:
                config = None
            if isinstance(config, dict):
                self.completed[name] = config

    def wait_live(self) -> None:
        """Until the server answers on HTTP: a start without --load-model flags returns at once."""
        deadline = time.monotonic() + self.load_timeout
        while True:
            self.check_running("during start-up")
            answer = self._get("/v2/health/live")
            if answer is not None and answer.status_code == 200:
                return
            if time.monotonic() > deadline:
                raise Refused(
                    f"tritonserver from {self.image} did not answer within --load-timeout {self.load_timeout:g} s.",
                    details=self.logs().splitlines()[-30:],
                )
            time.sleep(POLL_SECONDS)

    def model_ready(self, name: str, version: int | None) -> bool:
        path = f"/v2/models/{name}/versions/{version}/ready" if version else f"/v2/models/{name}/ready"
        answer = self._get(path)
        return answer is not None and answer.status_code == 200

    def wait_ready(
        self,
        models: dict[str, int | None] | None = None,
        requested: dict[str, Future] | None = None,
        during: str = "during start-up",
    ) -> None:
        """Wait until each of `models` (default: the start's) is ready at its version; refuse as soon
        as one failed: UNAVAILABLE in the index, or its load request (`requested`) refused. Each round
        asks for the repository index once, for every model of the wave at once."""
        deadline = time.monotonic() + self.load_timeout
        pending = dict(self.models if models is None else models)
        requested = requested or {}
        with progress.task("load", total=len(pending), unit="models ready") as bar:
            if self.wave and pending:
                bar.update(detail=self.wave)
            self._wait_ready(pending, requested, during, deadline, bar)

    def _wait_ready(
        self,
        pending: dict[str, int | None],
        requested: dict[str, Future],
        during: str,
        deadline: float,
        bar: progress.Task,
    ) -> None:
        """wait_ready's loop: `pending` shrinks as models become ready (each one advances `bar`) or
        are set aside as needing a GPU (which do not)."""
        rounds = 0
        while True:
            self.check_running(during)
            rounds += 1
            if rounds % 8 == 0:  # the log's tail: about once a second
                self.check_fatal_lines()
            # a paired model's load answers first: its previous version may fail and the model load again alone
            held = {name for name in self.paired if name in requested and not requested[name].done()}
            states = self.index()  # one request a round, however many models the wave loads
            for name in ready_among(pending, states, held):
                del pending[name]
                bar.advance()
            if not pending:
                return
            failed = [
                s
                for s in states
                if s.name in pending and s.name not in held and s.state == "UNAVAILABLE" and s.reason != UNLOADED
            ]
            refused = {
                name: answer.result()
                for name, answer in requested.items()
                if name in pending and answer.done() and answer.result()
            }
            failed += [
                ModelState(name, "", "UNAVAILABLE", why)
                for name, why in sorted(refused.items())
                if name not in {s.name for s in failed}
            ]
            if failed and all(s.name in self.overrides for s in failed):  # only models loaded on the CPU failed
                if self.gpu_models != "test":
                    raise self.gpu_failure(failed)
                for state in failed:
                    self.unloadable[state.name] = reason(state.reason)
                    pending.pop(state.name, None)
                failed = []
            if failed:
                raise self.load_failure(failed)
            if not pending:
                return
            for name, version in pending.items():
                if version is not None and self.unserved(name, version, states):
                    raise self.version_failure(name, version, states)
            if time.monotonic() > deadline:
                known = {s.name: s for s in self.index()}
                raise self.load_failure(
                    [known.get(n, ModelState(n, "", "LOADING", "still loading")) for n in pending], timed_out=True
                )
            time.sleep(poll_seconds(len(pending)))

    def check_running(self, during: str) -> None:
        """Refused when the server exited on its own; an infrastructure failure when something
        killed it (the daemon's OOM killer, `docker kill`). Every polling wait passes here, so a
        signal that was dropped is raised again here too."""
        checkpoint()
        assert self.container is not None
        self.container.reload()
        if self.container.status not in ("exited", "dead"):
            return
        state = self.container.attrs.get("State") or {}
        if state.get("OOMKilled") or state.get("ExitCode") == 137:
            why = (
                "out of memory, the daemon says"
                if state.get("OOMKilled")
                else "SIGKILL, exit code 137: `docker kill`, or the kernel's OOM killer"
            )
            raise InfrastructureError(
                f"""
                The tritonserver container {self.name} was killed {during} ({why}): nothing is wrong with
                the golden files. Give the server more memory (server_memory in triton-release.yaml, or a
                runner with more), or fewer models at once (--max-loaded), and run again.""",
                details=self.logs().splitlines()[-30:],
            )
        raise Refused(
            f"tritonserver exited {during} (image {self.image}, exit code {state.get('ExitCode', '?')}).",
            details=self.logs().splitlines()[-30:],
        )

    @staticmethod
    def unserved(name: str, version: int | None, states: list[ModelState]) -> bool:
        """The model is READY, but without `version`: its version_policy excludes it, and it will
        never load. (Triton lists every version it loads, LOADING, before any is READY.)"""
        mine = [s for s in states if s.name == name]
        return (
            version is not None
            and any(s.state == "READY" for s in mine)
            and not any(s.version == str(version) for s in mine)
        )

    def version_failure(self, name: str, version: int, states: list[ModelState]) -> Refused:
        served = ", ".join(
            sorted(
                (s.version for s in states if s.name == name and s.state == "READY"),
                key=lambda v: int(v) if v.isdigit() else 0,
            )
        )
        answer = self._get(f"/v2/models/{name}/config")
        try:
            policy = json.dumps(answer.json().get("version_policy")) if answer is not None else None
        except ValueError:
            policy = None
        return Refused(f"""
            Model {name} is ready in {self.image} with version {served} only, not version {version}, the
            newest version folder, which is the one tested: its config.pbtxt's version_policy
            {policy or ""} excludes it. Add {version} to version_policy (or use latest {{ num_versions: 1 }})
            and run again.""")

    def check_fatal_lines(self) -> None:
        fatal = [line for line in self.logs().splitlines() if any(f in line for f in FATAL_LOG_LINES)]
        if fatal:
            raise Refused(
                f"""
                The Python backend stub cannot start in {self.image}: a shared library it links is
                missing (above), so no Python model can load. Rebuild the image with
                `triton-release build` (it matches the stub to the image's Python), or give another
                --base-image.""",
                details=fatal[-5:],
            )

    def gpu_failure(self, states: list[ModelState]) -> Refused:
        names = ", ".join(s.name for s in states)
        reasons = "; ".join(f"{s.name}: {reason(s.reason)}" for s in states)
        logs = self.logs().splitlines()
        details = [line for state in states for line in [line for line in logs if state.name in line][-20:]]
        return Refused(
            f"""
            Model {names} has a KIND_GPU instance group and the server has no GPU (no --gpus): loaded
            on the CPU, it failed ({reasons}). Run on a GPU runner with --gpus all, or make the model
            load on a CPU; `test` and `release` can instead report it untested (gpu_models: test, the
            default, rather than require).""",
            details=details,
        )

    def load_failure(self, states: list[ModelState], timed_out: bool = False) -> Refused:
        logs = self.logs().splitlines()
        details = []
        for state in states:
            lines = [line for line in logs if state.name in line]
            details += [f"{state.name}: {state.state} {state.reason}".rstrip(), *lines[-20:]]
        names = ", ".join(s.name for s in states)
        why = f"did not become ready within --load-timeout {self.load_timeout:g} s" if timed_out else "failed to load"
        return Refused(
            f"""
            Model {names} {why} in {self.image}. The server's lines about it are above; fix the model
            (its model.py initialize, its config.pbtxt) and run again.""",
            details=details,
        )


def reason(text: str) -> str:
    """The server's reason for a failed load in one line: its first, without the words every such
    reason starts with (the traceback below it is in the server's log)."""
    first = next((line for line in text.strip().splitlines() if line.strip()), "")
    return _LOAD_FAILED.sub("", first.strip()).rstrip(";").strip() or "no reason given"
