"""The Docker daemon: one way to reach it, one message when it does not answer."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import docker
import requests

from triton_release.errors import InfrastructureError

PING_TIMEOUT = 15  # seconds a daemon has to answer its first requests (the API version, a ping)


def docker_client(
    timeout: int = 600, env: Mapping[str, str] | None = None, ping_timeout: float = PING_TIMEOUT
) -> docker.DockerClient:
    """A client of the daemon at DOCKER_HOST (of `env`, default os.environ). It must answer within
    `ping_timeout`; the long `timeout` is for the real work after that (builds, pushes, pulls)."""
    env = os.environ if env is None else env
    try:
        client = docker.from_env(timeout=ping_timeout, environment=dict(env))
        client.ping()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        host = re.sub(r"//[^/@]*@", "//", env.get("DOCKER_HOST") or "unix:///var/run/docker.sock")
        raise InfrastructureError(f"""
            No Docker daemon answers at DOCKER_HOST {host} within {ping_timeout:g} s
            ({exc.__class__.__name__}). Start one (locally: `make stack`), or point DOCKER_HOST at it; in
            a container action, /var/run/docker.sock must be mounted.""") from None
    client.api.timeout = timeout
    return client
