"""The peak memory of a tritonserver's container (`ContainerMemory.sample_memory`), as the
Docker daemon's stats give it: the cgroup's own peak where the daemon reports one (cgroup v1),
else the largest use sampled (cgroup v2). A figure the daemon does not give within STATS_TIMEOUT
is a missing figure, never an error. The same figures, with the processes the container runs,
say whether the next wave may load beside the current one (`room_for_next_wave`)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import docker
import requests

if TYPE_CHECKING:
    from docker.models.containers import Container

STATS_TIMEOUT = 10  # seconds the daemon has to give the container's memory figures
# The next wave loads beside the current wave's cases only with room to spare: the container's
# peak so far this many times within its memory limit (two waves loaded, and the cases' own use
# and a bigger wave on top), and the processes of the models loaded beside (a python model is a
# stub process of some forty threads) with those it runs now within this share of its pids limit.
PEAKS_IN_LIMIT = 4
PIDS_SHARE = 0.75


def room_beside(
    peak: int | None, memory_limit: int | None, pids: int | None, pids_limit: int | None, loaded: int, wanted: int
) -> int:
    """How many of the `wanted` models of the next wave may load beside the `loaded` ones: none
    unless `peak` (the container's peak memory so far) PEAKS_IN_LIMIT times is within
    `memory_limit`; then as many as keep `pids` (the processes and threads it runs now) and theirs
    (the loaded models' share of `pids`, each) within PIDS_SHARE of `pids_limit` (None: no such
    limit, all of them). A figure the daemon did not give, or a memory limit not known, is no
    room: the next wave then loads after the cases."""
    if peak is None or memory_limit is None or peak * PEAKS_IN_LIMIT > memory_limit or wanted < 1:
        return 0
    if pids_limit is None:
        return wanted
    if pids is None or loaded < 1:
        return 0
    each = -(-pids // loaded)  # the server's own threads counted in too: an estimate from above
    return max(0, min(wanted, int((PIDS_SHARE * pids_limit - pids) // each)))


class ContainerMemory:
    """The memory of the container `container`, through the daemon `client` (set by TritonServer)."""

    client: docker.DockerClient
    container: Container | None
    memory: int | None  # the container's memory limit
    pids: int | None  # the container's process limit
    peak_memory: int | None
    _cgroup_peak: bool

    def sample_memory(self, last: bool = False) -> int | None:
        """The container's peak memory so far: the cgroup's own peak where the daemon reports it
        (max_usage, cgroup v1: then only the `last` sample is read again), else the largest use
        sampled (cgroup v2); None while no figure could be read. A figure the daemon does not give
        within STATS_TIMEOUT is a missing figure, not an error."""
        if self._cgroup_peak and not last:
            return self.peak_memory
        self._record(self._stats())
        return self.peak_memory

    def room_for_next_wave(self, loaded: int, wanted: int) -> int:
        """How many of `wanted` models of the next wave may load beside the `loaded` ones' cases
        (`room_beside`), from one read of the daemon's figures, which counts as a memory sample too."""
        stats = self._stats()
        self._record(stats)
        pids = stats.get("pids_stats") if isinstance(stats, dict) else None
        current = pids.get("current") if isinstance(pids, dict) else None
        current = current if isinstance(current, int) else None
        return room_beside(self.peak_memory, self.memory, current, self.pids, loaded, wanted)

    def _record(self, stats: dict | None) -> None:
        memory = stats.get("memory_stats") if isinstance(stats, dict) else None
        if isinstance(memory, dict):
            peak, used = memory.get("max_usage"), memory.get("usage")
            self._cgroup_peak = isinstance(peak, int) and peak > 0
            figure = peak if self._cgroup_peak else used
            if isinstance(figure, int) and figure > 0:
                self.peak_memory = max(self.peak_memory or 0, figure)

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
