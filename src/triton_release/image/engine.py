"""The Docker daemon: one way to reach it, one message when it does not answer."""

from __future__ import annotations

import docker

from triton_release.errors import InfrastructureError


def docker_client(timeout: int = 600) -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except docker.errors.DockerException as exc:
        raise InfrastructureError(f"""
            No Docker daemon answers ({exc.__class__.__name__}). Start one (locally: `make stack`),
            or point DOCKER_HOST at it; in a container action, /var/run/docker.sock must be mounted.""") from None
