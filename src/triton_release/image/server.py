"""TritonServer: one tritonserver container's whole life, readiness and logs.

The container is always removed on exit, whatever happened inside the `with` block. It runs
with a memory and a process limit, so a runaway model fails its case, not the runner; and only
a bounded tail of its log is ever read, so a model that logs gigabytes costs the tool nothing.
Its models are those given at start, or another set switched in later (`switch_to`: tests in
waves), and it keeps the largest memory use it saw (`sample_memory`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker
import requests

from triton_release.settings import memory_bytes
from triton_release.errors import InfrastructureError, Refused, UsageError

HTTP_PORT, GRPC_PORT = "8000/tcp", "8001/tcp"
CONTAINER_LABEL = "triton-release.server"
RUN_ID_VARIABLE = "TRITON_RELEASE_RUN_ID"  # the label's value: the run's, so parallel runs on one daemon can tell theirs
# Lines after which no model of this server will ever load: fail now, not at --load-timeout.
FATAL_LOG_LINES = ("error while loading shared libraries",)
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")
log = logging.getLogger("triton_release")
LOG_TAIL_LINES = 500          # docker splits lines at 16 KiB: at most about 8 MiB from the daemon
LOG_TAIL_BYTES = 1 << 20      # and at most 1 MiB of it kept
LOG_FILE_LIMIT = {"max-size": "20m", "max-file": "2"}  # the runner's disk, whatever the model writes
# Load requests at once: Triton answers each when its model is loaded, and keeps the rest of its
# HTTP threads (8) for the readiness polls.
LOAD_REQUESTS = 4
UNLOADED = "unloaded"  # the repository index's reason for a model unloaded on request
STATS_TIMEOUT = 10     # seconds the daemon has to give the container's memory figures


def memory_limit(value: str | int | None, meminfo: str | None = None) -> int | None:
    """The server's memory limit in bytes: `value` (bytes, or a size such as 8g), or 3/4 of this
    machine's MemTotal when None (no limit where /proc/meminfo cannot be read)."""
    if value is None:
        try:
            text = meminfo if meminfo is not None else Path("/proc/meminfo").read_text()
        except OSError:
            return None
        found = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.M)
        return int(found.group(1)) * 1024 * 3 // 4 if found else None
    try:
        return memory_bytes(value)
    except ValueError:
        raise UsageError(f"""
            server_memory {value!r} is not a memory size of at least 64m: give bytes or a number with k,
            m or g (e.g. 8g) in triton-release.yaml, or leave it out for 3/4 of this machine's memory.""") from None


def own_container(client: docker.DockerClient):
    """The container this process runs in (an action container, act), or None on a host.

    A server started in that container's network namespace is reachable on 127.0.0.1 from here,
    whichever network the daemon put this container on.
    """
    if not Path("/.dockerenv").exists():
        return None
    candidates = [socket.gethostname()]
    try:
        candidates += _CONTAINER_ID.findall(Path("/proc/self/mountinfo").read_text())
    except OSError:
        pass
    for candidate in candidates:
        try:
            return client.containers.get(candidate)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError:
            return None
    return None


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True)
class ModelState:
    name: str
    version: str
    state: str
    reason: str


class TritonServer:
    """Start tritonserver from `image` with one --load-model per model; wait until ready."""

    def __init__(self, image: str, models: dict[str, int | None], *, all_models: bool = False,
                 load_timeout: float = 300, client: docker.DockerClient | None = None,
                 memory: str | int | None = None, pids: int | None = 4096) -> None:
        self.image = image
        self.models = dict(models)  # name -> version to wait for (None: any)
        self.all_models = all_models
        self.load_timeout = load_timeout
        self.memory = memory_limit(memory)
        if pids is not None and (isinstance(pids, bool) or not isinstance(pids, int) or pids < 1):
            raise UsageError(f"server_pids {pids!r} is not a number of processes; give a positive number "
                             "(default 4096) in triton-release.yaml.")
        self.pids = pids
        self.client = client or docker.from_env(timeout=120)
        self.container = None
        self.http_url = self.grpc_url = ""
        self.name = f"triton-release-{uuid.uuid4().hex[:12]}"
        self.loaded: dict[str, int | None] = {}  # what is loaded now: the start's models, or the last switch's
        self.peak_memory: int | None = None
        self._cgroup_peak = False  # the daemon reports the cgroup's own peak: only the last figure counts

    def command(self, ports: list[int] | None = None) -> list[str]:
        load = ["--load-model=*"] if self.all_models else [f"--load-model={m}" for m in self.models]
        stub_timeout = max(30, int(self.load_timeout))
        listen = []
        if ports:  # sharing a network namespace: ports free in it, on loopback only
            listen = [f"--http-port={ports[0]}", f"--grpc-port={ports[1]}", f"--metrics-port={ports[2]}",
                      "--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
        return ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit", *load,
                f"--backend-config=python,stub-timeout-seconds={stub_timeout}",
                "--exit-on-error=false", "--log-verbose=0", *listen]

    def limits(self) -> dict:
        """containers.run options bounding the server: memory (no swap beyond it), processes, log files."""
        options: dict = {"log_config": docker.types.LogConfig(type="json-file", config=LOG_FILE_LIMIT)}
        if self.memory is not None:
            options.update(mem_limit=self.memory, memswap_limit=self.memory)
        if self.pids is not None:
            options["pids_limit"] = self.pids
        return options

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> "TritonServer":
        try:
            here = own_container(self.client)
            common = dict(name=self.name, detach=True, labels={CONTAINER_LABEL: os.environ.get(RUN_ID_VARIABLE) or "1"}, shm_size="256m",
                          **self.limits())
            if here is not None:
                ports = free_ports(3)
                self.container = self.client.containers.run(
                    self.image, command=self.command(ports), network_mode=f"container:{here.id}", **common)
                self.http_url, self.grpc_url = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
            else:
                self.container = self.client.containers.run(
                    self.image, command=self.command(),
                    ports={HTTP_PORT: ("127.0.0.1", None), GRPC_PORT: ("127.0.0.1", None)}, **common)
                self.container.reload()
                published = self.container.attrs["NetworkSettings"]["Ports"]
                self.http_url = f"127.0.0.1:{published[HTTP_PORT][0]['HostPort']}"
                self.grpc_url = f"127.0.0.1:{published[GRPC_PORT][0]['HostPort']}"
            self.wait_ready()
            self.loaded = dict(self.models)
        except docker.errors.ImageNotFound:
            self.remove()
            raise UsageError(f"{self.image}: no such image on this Docker host; build it with "
                             "`triton-release build` or pull it.") from None
        except docker.errors.APIError as exc:
            self.remove()
            raise InfrastructureError(f"The Docker daemon failed to start tritonserver from {self.image}: "
                                      f"{exc.explanation or exc}") from None
        except requests.RequestException as exc:  # the daemon's socket timed out or dropped
            self.remove()
            raise InfrastructureError(f"The Docker daemon stopped answering while tritonserver started from "
                                      f"{self.image} ({exc.__class__.__name__}).") from None
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        if self.container is None:
            return
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except (docker.errors.APIError, requests.RequestException) as exc:  # never masks the error being reported
            log.warning(f"could not remove the server container {self.name} ({exc.__class__.__name__}); "
                        f"remove it with `docker rm -f {self.name}`")
        finally:
            self.container = None

    def logs(self) -> str:
        """The tail of the server's log: its last LOG_TAIL_LINES lines, at most LOG_TAIL_BYTES."""
        try:
            data = self.container.logs(tail=LOG_TAIL_LINES) if self.container else b""
        except (docker.errors.APIError, requests.RequestException):
            return ""
        if len(data) > LOG_TAIL_BYTES:
            data = data[-LOG_TAIL_BYTES:]
            data = data[data.find(b"\n") + 1:]  # no half line at the top
        return data.decode("utf-8", errors="replace")

    # -- readiness ----------------------------------------------------------------------------

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
            return [ModelState(str(m["name"]), str(m.get("version", "")), m.get("state", ""), m.get("reason", ""))
                    for m in listed]
        except (requests.RequestException, ValueError, KeyError, TypeError):  # not an index: none yet
            return []

    def model_ready(self, name: str, version: int | None) -> bool:
        path = f"/v2/models/{name}/versions/{version}/ready" if version else f"/v2/models/{name}/ready"
        answer = self._get(path)
        return answer is not None and answer.status_code == 200

    def wait_ready(self, models: dict[str, int | None] | None = None,
                   requested: dict[str, Future] | None = None, during: str = "during start-up") -> None:
        """Wait until each of `models` (default: the start's) is ready at its version; refuse as soon
        as one failed: UNAVAILABLE in the index, or its load request (`requested`) refused."""
        deadline = time.monotonic() + self.load_timeout
        pending = dict(self.models if models is None else models)
        requested = requested or {}
        rounds = 0
        while True:
            self.check_running(during)
            rounds += 1
            if rounds % 4 == 0:
                self.check_fatal_lines()
            for name, version in list(pending.items()):
                if self.model_ready(name, version):
                    del pending[name]
            if not pending:
                return
            states = self.index()
            failed = [s for s in states if s.name in pending and s.state == "UNAVAILABLE" and s.reason != UNLOADED]
            refused = {name: answer.result() for name, answer in requested.items()
                       if name in pending and answer.done() and answer.result()}
            failed += [ModelState(name, "", "UNAVAILABLE", why) for name, why in sorted(refused.items())
                       if name not in {s.name for s in failed}]
            if failed:
                raise self.load_failure(failed)
            for name, version in pending.items():
                if self.unserved(name, version, states):
                    raise self.version_failure(name, version, states)
            if time.monotonic() > deadline:
                states = {s.name: s for s in self.index()}
                raise self.load_failure([states.get(n, ModelState(n, "", "LOADING", "still loading"))
                                         for n in pending], timed_out=True)
            time.sleep(0.25)

    def check_running(self, during: str) -> None:
        self.container.reload()
        if self.container.status in ("exited", "dead"):
            raise Refused(f"tritonserver exited {during} (image {self.image}).",
                          details=self.logs().splitlines()[-30:])

    @staticmethod
    def unserved(name: str, version: int | None, states: list[ModelState]) -> bool:
        """The model is READY, but without `version`: its version_policy excludes it, and it will
        never load. (Triton lists every version it loads, LOADING, before any is READY.)"""
        mine = [s for s in states if s.name == name]
        return (version is not None and any(s.state == "READY" for s in mine)
                and not any(s.version == str(version) for s in mine))

    def version_failure(self, name: str, version: int, states: list[ModelState]) -> Refused:
        served = ", ".join(sorted((s.version for s in states if s.name == name and s.state == "READY"),
                                  key=lambda v: int(v) if v.isdigit() else 0))
        answer = self._get(f"/v2/models/{name}/config")
        try:
            policy = json.dumps(answer.json().get("version_policy")) if answer is not None else None
        except ValueError:
            policy = None
        return Refused(f"""
            Model {name} is ready in {self.image} with version {served} only, not version {version}, the
            newest version folder, which is the one tested: its config.pbtxt's version_policy
            {policy or ''} excludes it. Add {version} to version_policy (or use latest {{ num_versions: 1 }})
            and run again.""")

    def check_fatal_lines(self) -> None:
        fatal = [line for line in self.logs().splitlines() if any(f in line for f in FATAL_LOG_LINES)]
        if fatal:
            raise Refused(f"""
                The Python backend stub cannot start in {self.image}: a shared library it links is
                missing (above), so no Python model can load. Rebuild the image with
                `triton-release build` (it matches the stub to the image's Python), or give another
                --base-image.""", details=fatal[-5:])

    def load_failure(self, states: list[ModelState], timed_out: bool = False) -> Refused:
        logs = self.logs().splitlines()
        details = []
        for state in states:
            lines = [line for line in logs if state.name in line]
            details += [f"{state.name}: {state.state} {state.reason}".rstrip(), *lines[-20:]]
        names = ", ".join(s.name for s in states)
        why = (f"did not become ready within --load-timeout {self.load_timeout:g} s" if timed_out
               else "failed to load")
        return Refused(f"""
            Model {names} {why} in {self.image}. The server's lines about it are above; fix the model
            (its model.py initialize, its config.pbtxt) and run again.""", details=details)

    # -- waves: another set of models in the same server ----------------------------------------

    def switch_to(self, models: dict[str, int | None]) -> None:
        """Make `models` the loaded set: unload the loaded models not among them and wait until they
        are gone, then load the others and wait until each is ready at its version, refusing as at
        start-up. A model in both sets stays loaded (a reload would cost its start again)."""
        self.unload(sorted(set(self.loaded) - set(models)))
        self.load({name: version for name, version in models.items() if name not in self.loaded})

    def unload(self, names: list[str]) -> None:
        """Each model by name, so that a step the next wave also needs is not unloaded with its
        ensemble (unload_dependents stays false). A model that does not unload within
        --load-timeout is a warning: its cases have run, and the next wave loads beside it."""
        if not names:
            return
        for name in names:
            try:
                requests.post(f"http://{self.http_url}/v2/repository/models/{name}/unload", json={}, timeout=30)
            except requests.RequestException:
                pass  # the index below says whether it unloaded
        deadline = time.monotonic() + self.load_timeout
        while True:
            self.check_running("while unloading models")
            states = self.index()
            busy = sorted({s.name for s in states if s.name in names and s.state in ("READY", "LOADING", "UNLOADING")})
            if states and not busy:
                break
            if time.monotonic() > deadline:
                log.warning(f"{', '.join(busy) or 'the models'} did not unload within --load-timeout "
                            f"{self.load_timeout:g} s; the next models load beside them")
                break
            time.sleep(0.2)
        for name in names:
            self.loaded.pop(name, None)

    def load(self, models: dict[str, int | None]) -> None:
        """Load `models` (a few requests at once) and wait until each is ready at its version."""
        if not models:
            return
        pool = ThreadPoolExecutor(max_workers=min(LOAD_REQUESTS, len(models)), thread_name_prefix="triton-load")
        try:
            requested = {name: pool.submit(self._request_load, name) for name in sorted(models)}
            self.wait_ready(models, requested, during="while loading models")
        finally:  # a refused or interrupted wait leaves the open requests to the server's removal
            pool.shutdown(wait=False, cancel_futures=True)
        self.loaded.update(models)
        self.sample_memory()

    def _request_load(self, name: str) -> str:
        """POST the load of `name`; Triton answers when it is loaded. "" when it was, else the why."""
        try:
            answer = requests.post(f"http://{self.http_url}/v2/repository/models/{name}/load", json={},
                                   timeout=self.load_timeout + 30)
        except requests.RequestException as exc:
            return f"the load request failed ({exc.__class__.__name__})"
        if answer.ok:
            return ""
        try:
            why = answer.json().get("error", "")
        except (ValueError, AttributeError):
            why = ""
        return str(why or answer.text or f"HTTP {answer.status_code}").strip()

    # -- memory -------------------------------------------------------------------------------

    def sample_memory(self, last: bool = False) -> int | None:
        """The container's peak memory so far: the cgroup's own peak where the daemon reports it
        (max_usage, cgroup v1: then only the `last` sample is read again), else the largest use
        sampled (cgroup v2); None while no figure could be read. A figure the daemon does not give
        within STATS_TIMEOUT is a missing figure, not an error."""
        if self._cgroup_peak and not last:
            return self.peak_memory
        stats = self._stats()
        memory = stats.get("memory_stats") if isinstance(stats, dict) else None
        if isinstance(memory, dict):
            peak, used = memory.get("max_usage"), memory.get("usage")
            self._cgroup_peak = isinstance(peak, int) and peak > 0
            figure = peak if self._cgroup_peak else used
            if isinstance(figure, int) and figure > 0:
                self.peak_memory = max(self.peak_memory or 0, figure)
        return self.peak_memory

    def _stats(self) -> dict | None:
        container = self.container
        if container is None:
            return None
        found: list = []

        def read() -> None:
            try:
                options = {"one_shot": True} if docker.utils.version_gte(self.client.api.api_version, "1.41") else {}
                found.append(container.stats(stream=False, **options))
            except (docker.errors.DockerException, requests.RequestException, ValueError):
                pass

        reader = threading.Thread(target=read, name="triton-stats", daemon=True)  # never holds up an exit
        reader.start()
        reader.join(STATS_TIMEOUT)
        return found[0] if found else None
