"""The Docker daemon: one way to reach it, one message when it does not answer."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import docker
import requests

from triton_release.errors import InfrastructureError, UsageError

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


def registry_host(image: str) -> str | None:
    """The registry host an image reference names (`127.0.0.1:5000/team/models:1`, `ghcr.io/org/m`),
    as Docker tells one: a first path component with a '.' or a ':', or `localhost`; None for a
    name such as `models:candidate` or `team/models`, which the daemon would pull from Docker Hub."""
    first, slash, _ = image.partition("/")
    if not slash:
        return None
    return first if ("." in first or ":" in first or first == "localhost") else None


def require_local_image(client: docker.DockerClient, image: str) -> None:
    """Refuse (exit 2) to serve an image that is not on this Docker host and names no registry:
    the daemon would try Docker Hub for it, and fail with a DNS or access error that says nothing
    of the mistake. An image id, or a name with a registry host, is left to the daemon (pulled)."""
    if registry_host(image) is not None:
        return
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UsageError(
            f"no such local image {image}: build it with `triton-release build --tag {image}` "
            "(or give a name with its registry host, e.g. 127.0.0.1:5000/team/models:1.2.3, to pull one)."
        ) from None
    except (docker.errors.APIError, requests.RequestException) as exc:
        raise InfrastructureError(
            f"The Docker daemon could not tell whether the image {image} is here ({exc.__class__.__name__})."
        ) from None
