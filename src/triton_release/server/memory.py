"""The peak memory of a tritonserver's container (`ContainerMemory.sample_memory`), as the
Docker daemon's stats give it: the cgroup's own peak where the daemon reports one (cgroup v1),
else the largest use sampled (cgroup v2). A figure the daemon does not give within STATS_TIMEOUT
is a missing figure, never an error."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import docker
import requests

if TYPE_CHECKING:
    from docker.models.containers import Container

STATS_TIMEOUT = 10  # seconds the daemon has to give the container's memory figures


class ContainerMemory:
    """The memory of the container `container`, through the daemon `client` (set by TritonServer)."""

    client: docker.DockerClient
    container: Container | None
    peak_memory: int | None
    _cgroup_peak: bool

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
