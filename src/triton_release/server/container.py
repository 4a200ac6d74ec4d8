"""TritonServer: one tritonserver container's whole life, readiness and logs.

The container is always removed on exit, whatever happened inside the `with` block. It runs
with a memory and a process limit, so a runaway model fails its case, not the runner; and only
a bounded tail of its log is ever read, so a model that logs gigabytes costs the tool nothing.
Its models are those given at start, or another set switched in later (`switch_to`: tests in
waves), and it keeps the largest memory use it saw (`sample_memory`).

A model with a config override (`overrides`: a KIND_GPU model on a machine without GPUs, given
its config for the CPU) is never in the start's --load-model flags, where Triton would read its
config.pbtxt and refuse it: it is loaded through the repository API with its override once the
server is up, and so are the models that need it (`deferred`: an ensemble's load makes Triton
load its steps from their files), after it. With `gpus` the container gets those GPUs instead.
So is a model served with its previous version beside its tested one (`paired`, for drift):
both versions' stubs start together, in its first load.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import requests

from triton_release.contract import OWNER_LABEL, RUN_ID_VARIABLE, SERVER_LABEL
from triton_release.errors import InfrastructureError, UsageError
from triton_release.processes import alive, owner_labels, remove_beside, remove_by_name
from triton_release.server.model_control import ModelControl
from triton_release.server.readiness import logged_load_seconds
from triton_release.settings import ServerOptions, memory_bytes

if TYPE_CHECKING:
    from docker.models.containers import Container

HTTP_PORT, GRPC_PORT = "8000/tcp", "8001/tcp"
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")
log = logging.getLogger("triton_release")
LOG_TAIL_LINES = 500  # docker splits lines at 16 KiB: at most about 8 MiB from the daemon
LOG_TAIL_BYTES = 1 << 20  # and at most 1 MiB of it kept
LOG_FILE_LIMIT = {"max-size": "20m", "max-file": "2"}  # the runner's disk, whatever the model writes
# What the daemon answers a GPU request with when it has no GPU runtime (or the runtime no GPU).
NO_GPU_RUNTIME = ("could not select device driver", "nvidia-container-cli", "nvidia-smi", "no cuda-capable device")


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


def remove_orphans(client: docker.DockerClient) -> list[str]:
    """Remove the containers (servers, probes) whose run is gone (killed: no cleanup code of its
    ran), as their owner label tells; one whose owner may still run is left alone. Returns their names."""
    removed: list[str] = []
    try:  # the list's own fields: a container another run removes meanwhile is never inspected
        found = client.api.containers(all=True, filters={"label": OWNER_LABEL})
    except docker.errors.APIError:
        return removed
    for container in found:
        try:
            who = json.loads((container.get("Labels") or {}).get(OWNER_LABEL) or "{}")
        except ValueError:
            continue
        if not isinstance(who, dict) or alive(who, elsewhere=True):  # another job's, maybe
            continue
        try:
            client.api.remove_container(container["Id"], force=True)
            removed.append(((container.get("Names") or ["/?"])[0]).lstrip("/"))
        except docker.errors.APIError:
            continue  # gone meanwhile, or another run removes it
    if removed:
        log.warning(f"removed {len(removed)} container(s) left by runs that were killed: {', '.join(removed)}")
    return removed


def own_container(client: docker.DockerClient, mountinfo: str | None = None) -> Container | None:
    """The container this process runs in (an action container, act), or None on a host.

    A server started in that container's network namespace is reachable on 127.0.0.1 from here,
    whichever network the daemon put this container on. The container is the one whose folder
    holds this mount namespace's /etc/hostname (then /etc/hosts, /etc/resolv.conf): its full id,
    from `mountinfo` (this process's /proc/self/mountinfo by default). Never the host name: the
    daemon's lookup also matches container names and id prefixes, so a runner whose host name is
    another container's name (or a prefix of its id) would join that container's network. A
    container the daemon finds under an id is taken only when its own id is that full id."""
    if mountinfo is None:
        if not Path("/.dockerenv").exists():
            return None
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    for candidate in own_container_ids(mountinfo):
        try:
            found = client.containers.get(candidate)
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError:
            return None
        if found.id == candidate:
            return found
    return None


# the files Docker bind-mounts into each container from that container's own folder, the most telling first
_OWN_FILES = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")


def own_container_ids(mountinfo: str) -> list[str]:
    """The full container ids in the sources of this mount namespace's /etc/hostname, /etc/hosts and
    /etc/resolv.conf, /etc/hostname's first: its own. Any other container path in the table is
    another container's (a daemon running in this same namespace shows each container's shm mount
    here): never joined."""
    found: dict[str, list[str]] = {name: [] for name in _OWN_FILES}
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] in _OWN_FILES:
            found[fields[4]] += _CONTAINER_ID.findall(fields[3])
    ordered: list[str] = []
    for name in _OWN_FILES:
        ordered += [i for i in found[name] if i not in ordered]
    return ordered


def device_requests(gpus: str | None) -> list:
    """docker's device requests for the `gpus` setting (all, a count, or device=<ids>); [] for none."""
    if not gpus:
        return []
    if gpus == "all":
        return [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if gpus.startswith("device="):
        ids = [part for part in gpus.removeprefix("device=").split(",") if part]
        return [docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])]
    return [docker.types.DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class TritonServer(ModelControl):
    """Start tritonserver from `image` with one --load-model per model; wait until ready.

    `overrides`: model -> the config (JSON) it is loaded with through the repository API;
    `deferred`: model -> the overridden models it needs, loaded before it. `gpu_models`: "test",
    an overridden model that fails to load is set aside in `unloadable` (with the models that
    need it) and the others go on; "require", it is refused like any model failing to load.
    `paired`: model -> the config it is loaded with through the repository API, its previous
    version beside its tested one (drift); one that fails so is loaded alone, listed in `apart`.
    `auto_complete`: False starts it with --disable-auto-complete-config, which only a server of
    models that cannot be changed by it may be (models/config/completion.py says which).
    """

    @classmethod
    def started_as(
        cls, options: ServerOptions, image: str, models: dict[str, int | None], **kwargs: Any
    ) -> TritonServer:
        """The server `options` describe (settings.ServerOptions: its timeout, limits and GPUs)."""
        return cls(
            image,
            models,
            load_timeout=options.load_timeout,
            memory=options.memory,
            pids=options.pids,
            gpus=options.gpus,
            gpu_models=options.gpu_models,
            **kwargs,
        )

    def __init__(
        self,
        image: str,
        models: dict[str, int | None],
        *,
        all_models: bool = False,
        load_timeout: float = 300,
        client: docker.DockerClient | None = None,
        memory: str | int | None = None,
        pids: int | None = 4096,
        overrides: Mapping[str, str] | None = None,
        deferred: Mapping[str, Iterable[str]] | None = None,
        gpus: str | None = None,
        gpu_models: str = "test",
        paired: Mapping[str, str] | None = None,
        auto_complete: bool = True,
        removed_beside: bool = False,
    ) -> None:
        self.image = image
        self.auto_complete = auto_complete
        self.removed_beside = removed_beside  # the container removed in a thread (processes.remove_beside)
        self.models = dict(models)  # name -> version to wait for (None: any)
        self.overrides = dict(overrides or {})
        self.paired = dict(paired or {})
        self.apart: dict[str, str] = {}
        self.deferred = {name: frozenset(needs) for name, needs in (deferred or {}).items()}
        # `*` would load them from their files
        self.all_models = all_models and not self.overrides and not self.paired
        self.gpus = gpus
        self.gpu_models = gpu_models
        self.unloadable: dict[str, str] = {}  # model -> why it did not load on the CPU (gpu_models "test")
        self.on_cpu: set[str] = set()  # overridden models that loaded
        self.completed: dict[str, dict] = {}  # auto-complete models: their config as the server completed it
        self.load_timeout = load_timeout
        self.memory = memory_limit(memory)
        if pids is not None and (isinstance(pids, bool) or not isinstance(pids, int) or pids < 1):
            raise UsageError(
                f"server_pids {pids!r} is not a number of processes; give a positive number "
                "(default 4096) in triton-release.yaml."
            )
        self.pids = pids
        self.client = client or docker.from_env(timeout=120)
        self.container = None
        self.http_url = self.grpc_url = ""
        self.name = f"triton-release-{uuid.uuid4().hex[:12]}"
        self.loaded: dict[str, int | None] = {}  # what is loaded now: the start's models, or the last switch's
        self.peak_memory: int | None = None
        self.start_load_seconds: float | None = None  # of the start: its models' load, None where unknown
        self._cgroup_peak = False  # the daemon reports the cgroup's own peak: only the last figure counts
        self._created = False  # a container of this name may exist

    @property
    def at_start(self) -> dict[str, int | None]:
        """The models the start's --load-model flags name: neither overridden nor paired, nor needing
        one that is overridden."""
        loaded_later = self.overrides.keys() | self.paired.keys() | self.deferred.keys()
        return {m: v for m, v in self.models.items() if m not in loaded_later}

    def command(self, ports: list[int] | None = None) -> list[str]:
        load = ["--load-model=*"] if self.all_models else [f"--load-model={m}" for m in self.at_start]
        stub_timeout = max(30, int(self.load_timeout))
        listen = []
        if ports:  # sharing a network namespace: ports free in it, on loopback only
            listen = [
                f"--http-port={ports[0]}",
                f"--grpc-port={ports[1]}",
                f"--metrics-port={ports[2]}",
                "--http-address=127.0.0.1",
                "--grpc-address=127.0.0.1",
            ]
        return [
            "tritonserver",
            "--model-repository=/models",
            "--model-control-mode=explicit",
            *load,
            f"--backend-config=python,stub-timeout-seconds={stub_timeout}",
            *([] if self.auto_complete else ["--disable-auto-complete-config"]),
            "--exit-on-error=false",
            "--log-verbose=0",
            *listen,
        ]

    def limits(self) -> dict:
        """containers.run options bounding the server: memory (no swap beyond it), processes, log files."""
        options: dict = {"log_config": docker.types.LogConfig(type="json-file", config=LOG_FILE_LIMIT)}
        if self.memory is not None:
            options.update(mem_limit=self.memory, memswap_limit=self.memory)
        if self.pids is not None:
            options["pids_limit"] = self.pids
        if self.gpus:
            options["device_requests"] = device_requests(self.gpus)
        return options

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> TritonServer:
        try:
            here = own_container(self.client)
            remove_orphans(self.client)
            labels = {SERVER_LABEL: os.environ.get(RUN_ID_VARIABLE) or "1", **owner_labels()}
            common = dict(name=self.name, detach=True, labels=labels, shm_size="256m", **self.limits())
            self._created = True  # from here a failed run may leave a container: removed by its name
            if here is not None:
                ports = free_ports(3)
                self.container = self.client.containers.run(
                    self.image, command=self.command(ports), network_mode=f"container:{here.id}", **common
                )
                self.http_url, self.grpc_url = f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
            else:
                self.container = self.client.containers.run(
                    self.image,
                    command=self.command(),
                    ports={HTTP_PORT: ("127.0.0.1", None), GRPC_PORT: ("127.0.0.1", None)},
                    **common,
                )
                self.container.reload()
                published = self.container.attrs["NetworkSettings"]["Ports"]
                self.http_url = f"127.0.0.1:{published[HTTP_PORT][0]['HostPort']}"
                self.grpc_url = f"127.0.0.1:{published[GRPC_PORT][0]['HostPort']}"
            start = self.at_start
            self.wait_ready(start)
            self.start_load_seconds = self.logged_load_seconds() if start else 0.0
            self.loaded = dict(start)
            later = {m: v for m, v in self.models.items() if m not in start}
            if later:
                begun = time.monotonic()
                self.wait_live()
                self.load(later, sample=False)  # the wave's sample after its cases reads the memory
                if self.start_load_seconds is not None:  # unknown stays unknown: the start's time holds it
                    self.start_load_seconds += time.monotonic() - begun
        except docker.errors.ImageNotFound:
            self.remove()
            raise UsageError(
                f"{self.image}: no such image on this Docker host; build it with `triton-release build` or pull it."
            ) from None
        except docker.errors.APIError as exc:
            self.remove()
            why = str(exc.explanation or exc)
            if self.gpus and any(sign in why.lower() for sign in NO_GPU_RUNTIME):
                raise InfrastructureError(f"""
                    --gpus {self.gpus}: the Docker host has no GPU runtime (the NVIDIA Container Toolkit)
                    or no GPU, so the tritonserver container cannot get GPUs (the daemon said: {why}).
                    Drop --gpus (gpus: in triton-release.yaml, the action's input gpus) to test KIND_GPU
                    models on the CPU, or run on a GPU runner with the NVIDIA Container Toolkit.""") from None
            raise InfrastructureError(
                f"The Docker daemon failed to start tritonserver from {self.image}: {why}"
            ) from None
        except requests.RequestException as exc:  # the daemon's socket timed out or dropped
            self.remove()
            raise InfrastructureError(
                f"The Docker daemon stopped answering while tritonserver started from "
                f"{self.image} ({exc.__class__.__name__})."
            ) from None
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def remove(self) -> None:
        """Remove the server by its name, as the probes are: also when a signal cut its create short
        and the daemon is still making it (then it is looked for for a few seconds), or when the
        create returned and the signal came before its handle was kept."""
        if not self._created:
            return
        self._created = False
        remove = remove_beside if self.removed_beside else remove_by_name
        remove(self.client, self.name, created=self.container is not None)
        self.container = None

    def logged_load_seconds(self) -> float | None:
        """The seconds the server's log shows its loads took so far (readiness.logged_load_seconds);
        None when it shows none or the daemon did not give the log."""
        try:
            log = self.container.logs(timestamps=True) if self.container else b""
        except (docker.errors.APIError, requests.RequestException):
            return None
        return logged_load_seconds(log.decode("utf-8", errors="replace"))

    def logs(self) -> str:
        """The tail of the server's log: its last LOG_TAIL_LINES lines, at most LOG_TAIL_BYTES."""
        try:
            data = self.container.logs(tail=LOG_TAIL_LINES) if self.container else b""
        except (docker.errors.APIError, requests.RequestException):
            return ""
        if len(data) > LOG_TAIL_BYTES:
            data = data[-LOG_TAIL_BYTES:]
            data = data[data.find(b"\n") + 1 :]  # no half line at the top
        return data.decode("utf-8", errors="replace")
