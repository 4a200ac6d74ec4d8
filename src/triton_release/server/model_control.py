"""The repository API of a running tritonserver: `ModelControl`, the models' loads and unloads,
built on the server's readiness and failures (server/readiness.py) and its container's memory
(server/memory.py).

`TritonServer` (server/container.py) owns the container and its life; this is what it does with the
server inside, down to loading a model with another config: `paired`, a model's previous version
beside its tested one from its first load (for drift, models/drift.py's `side_by_side`), and
`load_config`, a tested model reloaded so. A failed load fails at once, never at --load-timeout; a
model that will never load (its version excluded, its stub unable to start) fails at once too.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from triton_release.server.memory import ContainerMemory
from triton_release.server.readiness import POLL_SECONDS, ModelState, Readiness, reason

__all__ = ["ModelControl", "ModelState"]

log = logging.getLogger("triton_release")
# Load requests at once: Triton answers each when its model is loaded, and keeps the rest of its
# HTTP threads (8) for the readiness polls.
LOAD_REQUESTS = 4


class ModelControl(Readiness, ContainerMemory):
    """The models of the server at `http_url`, in the container `container` (set by TritonServer)."""

    deferred: dict[str, frozenset[str]]
    on_cpu: set[str]
    loaded: dict[str, int | None]
    paired: dict[str, str]  # model -> the config serving its previous version beside the tested one
    apart: dict[str, str]  # paired models whose previous version did not load beside: why (loaded alone)

    # -- waves: another set of models in the same server ----------------------------------------

    def switch_to(self, models: dict[str, int | None]) -> None:
        """Make `models` the loaded set: unload the loaded models not among them and wait until they
        are gone, then load the others and wait until each is ready at its version, refusing as at
        start-up. A model in both sets stays loaded (a reload would cost its start again); one
        already found `unloadable` is not tried again."""
        self.unload(sorted(set(self.loaded) - set(models)))
        self.load({name: version for name, version in models.items() if name not in self.loaded})

    def unload(self, names: list[str]) -> None:
        """Each model by name, so that a step the next wave also needs is not unloaded with its
        ensemble (unload_dependents stays false). A model that does not unload within
        --load-timeout is a warning: its cases have run, and the next wave loads beside it."""
        if not names:
            return
        for name in names:
            with contextlib.suppress(requests.RequestException):  # the index below says whether it unloaded
                requests.post(f"http://{self.http_url}/v2/repository/models/{name}/unload", json={}, timeout=30)
        deadline = time.monotonic() + self.load_timeout
        while True:
            self.check_running("while unloading models")
            states = self.index()
            busy = sorted({s.name for s in states if s.name in names and s.state in ("READY", "LOADING", "UNLOADING")})
            if states and not busy:
                break
            if time.monotonic() > deadline:
                log.warning(
                    f"{', '.join(busy) or 'the models'} did not unload within --load-timeout "
                    f"{self.load_timeout:g} s; the next models load beside them"
                )
                break
            time.sleep(POLL_SECONDS)
        for name in names:
            self.loaded.pop(name, None)

    def load(self, models: dict[str, int | None], *, sample: bool = True) -> None:
        """Load `models` (a few requests at once) and wait until each is ready at its version: the
        models needing an overridden one after the others. A model needing one found `unloadable`
        is set aside with it, never loaded. `sample`: read the container's memory once they are
        (the start's loads do not: its wave's sample after the cases follows, and the daemon's
        second figure in a row comes on its next one-second round)."""
        models = {name: version for name, version in models.items() if name not in self.unloadable}
        first = {name: version for name, version in models.items() if name not in self.deferred}
        self._load(first, sample=sample)
        then = {}
        for name, version in models.items():
            if name in first:
                continue
            missing = sorted(self.deferred[name] & set(self.unloadable))
            if missing:
                self.unloadable[name] = f"it needs {', '.join(missing)}, which did not load on the CPU"
            else:
                then[name] = version
        self._load(then, sample=sample)

    def _load(self, models: dict[str, int | None], *, sample: bool = True) -> None:
        if not models:
            return
        pool = ThreadPoolExecutor(max_workers=min(LOAD_REQUESTS, len(models)), thread_name_prefix="triton-load")
        try:
            requested = {
                name: pool.submit(self._request_paired if name in self.paired else self._request_load, name)
                for name in sorted(models)
            }
            self.wait_ready(models, requested, during="while loading models")
        finally:  # a refused or interrupted wait leaves the open requests to the server's removal
            pool.shutdown(wait=False, cancel_futures=True)
        ready = {name: version for name, version in models.items() if name not in self.unloadable}
        self.loaded.update(ready)
        self.on_cpu.update(name for name in ready if name in self.overrides)
        if sample:
            self.sample_memory()

    def _request_load(self, name: str, config: str | None = None) -> str:
        """POST the load of `name` with `config`, else its config override, if any; Triton answers
        when it is loaded. "" when it was, else the why."""
        config = config if config is not None else self.overrides.get(name)
        body = {"parameters": {"config": config}} if config is not None else {}
        try:
            answer = requests.post(
                f"http://{self.http_url}/v2/repository/models/{name}/load", json=body, timeout=self.load_timeout + 30
            )
        except requests.RequestException as exc:
            return f"the load request failed ({exc.__class__.__name__})"
        if answer.ok:
            return ""
        try:
            why = answer.json().get("error", "")
        except (ValueError, AttributeError):
            why = ""
        return str(why or answer.text or f"HTTP {answer.status_code}").strip()

    def _request_paired(self, name: str) -> str:
        """Load `name` with its previous version beside the tested one (`paired`); when that fails,
        as the image holds it: a previous version that does not load is drift's note (`apart`),
        never the tested version's failure. "" when loaded, else the why of the load alone."""
        why = self._request_load(name, self.paired[name]) if name not in self.apart else "loaded alone before"
        if not why:
            return ""
        self.apart.setdefault(name, reason(why))
        return self._request_load(name)

    def load_config(self, name: str, config: str, versions: list[int]) -> str:
        """(Re)load `name` with `config` (the load's `config` parameter) and check that each of
        `versions` is ready: "" when they are, else why not. Never refuses: a model already
        tested is reloaded for a comparison (drift), whose failure is a note. A failed reload
        leaves what was loaded as it was (Triton keeps the versions it served)."""
        why = self._request_load(name, config)
        if why:
            return reason(why)
        missing = [str(v) for v in versions if not self.model_ready(name, v)]
        return f"version {', '.join(missing)} not ready after the load" if missing else ""

    def load_configs(self, loads: dict[str, tuple[str, list[int]]]) -> dict[str, str]:
        """`load_config` of each model (name -> (config, versions)), LOAD_REQUESTS at a time: Triton
        loads different models side by side. Name -> "" when its versions are ready, else why not."""
        if len(loads) <= 1:
            return {name: self.load_config(name, *load) for name, load in loads.items()}
        pool = ThreadPoolExecutor(max_workers=min(LOAD_REQUESTS, len(loads)), thread_name_prefix="triton-load")
        try:
            asked = {name: pool.submit(self.load_config, name, *load) for name, load in loads.items()}
            return {name: future.result() for name, future in asked.items()}
        finally:  # interrupted: the open requests are left to the server's removal
            pool.shutdown(wait=False, cancel_futures=True)
