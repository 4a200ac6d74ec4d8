"""TritonServer: one tritonserver container's whole life, readiness and logs.

The container is always removed on exit, whatever happened inside the `with` block.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import docker
import requests

from triton_release.errors import InfrastructureError, Refused

HTTP_PORT, GRPC_PORT = "8000/tcp", "8001/tcp"
CONTAINER_LABEL = "triton-release.server"


@dataclass(frozen=True)
class ModelState:
    name: str
    version: str
    state: str
    reason: str


class TritonServer:
    """Start tritonserver from `image` with one --load-model per model; wait until ready."""

    def __init__(self, image: str, models: dict[str, int | None], *, all_models: bool = False,
                 load_timeout: float = 300, client: docker.DockerClient | None = None) -> None:
        self.image = image
        self.models = dict(models)  # name -> version to wait for (None: any)
        self.all_models = all_models
        self.load_timeout = load_timeout
        self.client = client or docker.from_env(timeout=120)
        self.container = None
        self.http_url = self.grpc_url = ""
        self.name = f"triton-release-{uuid.uuid4().hex[:12]}"

    def command(self) -> list[str]:
        load = ["--load-model=*"] if self.all_models else [f"--load-model={m}" for m in self.models]
        stub_timeout = max(30, int(self.load_timeout))
        return ["tritonserver", "--model-repository=/models", "--model-control-mode=explicit", *load,
                f"--backend-config=python,stub-timeout-seconds={stub_timeout}",
                "--exit-on-error=false", "--log-verbose=0"]

    # -- life ---------------------------------------------------------------------------------

    def __enter__(self) -> "TritonServer":
        try:
            self.container = self.client.containers.run(
                self.image, command=self.command(), name=self.name, detach=True,
                labels={CONTAINER_LABEL: "1"}, shm_size="256m",
                ports={HTTP_PORT: ("127.0.0.1", None), GRPC_PORT: ("127.0.0.1", None)},
            )
            self.container.reload()
            ports = self.container.attrs["NetworkSettings"]["Ports"]
            self.http_url = f"127.0.0.1:{ports[HTTP_PORT][0]['HostPort']}"
            self.grpc_url = f"127.0.0.1:{ports[GRPC_PORT][0]['HostPort']}"
            self.wait_ready()
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
        except docker.errors.APIError as exc:
            raise InfrastructureError(f"Could not remove the server container {self.name}: {exc}") from None
        finally:
            self.container = None

    def logs(self) -> str:
        try:
            return self.container.logs().decode("utf-8", errors="replace") if self.container else ""
        except docker.errors.APIError:
            return ""

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
        except requests.RequestException:
            return []
        return [ModelState(m["name"], str(m.get("version", "")), m.get("state", ""), m.get("reason", ""))
                for m in answer.json()]

    def model_ready(self, name: str, version: int | None) -> bool:
        path = f"/v2/models/{name}/versions/{version}/ready" if version else f"/v2/models/{name}/ready"
        answer = self._get(path)
        return answer is not None and answer.status_code == 200

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.load_timeout
        pending = dict(self.models)
        while True:
            self.container.reload()
            if self.container.status in ("exited", "dead"):
                raise Refused(f"tritonserver exited during start-up (image {self.image}).",
                              details=self.logs().splitlines()[-30:])
            for name, version in list(pending.items()):
                if self.model_ready(name, version):
                    del pending[name]
            if not pending:
                return
            failed = [s for s in self.index() if s.name in pending and s.state == "UNAVAILABLE"]
            if failed:
                raise self.load_failure(failed)
            if time.monotonic() > deadline:
                states = {s.name: s for s in self.index()}
                raise self.load_failure([states.get(n, ModelState(n, "", "LOADING", "still loading"))
                                         for n in pending], timed_out=True)
            time.sleep(0.25)

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
