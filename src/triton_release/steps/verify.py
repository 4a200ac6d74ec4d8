"""Verify a release: pulled, and its own golden cases run against it (before a rollback points a
channel back at it, or when its evidence is attached again)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from triton_release.contract import MODELS_LABEL, REVISION_LABEL
from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.history.bump import checkout_at
from triton_release.models.repository import Repository
from triton_release.steps.golden import DEFAULT_SERVER, test

if TYPE_CHECKING:
    from triton_release.models.suite import GoldenRun
    from triton_release.registry.client import RegistryRepository
    from triton_release.settings import ServerOptions


def verify_release(
    repository: RegistryRepository,
    version: str,
    model_repository: Path,
    *,
    server_options: ServerOptions = DEFAULT_SERVER,
) -> GoldenRun:
    """Pull release X.Y.Z and run the golden cases of the commit it was built from."""
    import docker

    from triton_release.image.engine import docker_client
    from triton_release.registry.rollback import release_manifest

    release_manifest(repository, version)  # an unknown version is refused before any pull
    image = f"{repository}:{version}"
    client = docker_client()
    credentials = repository.credentials
    try:
        client.images.pull(str(repository), tag=version, auth_config=credentials.docker_auth() if credentials else None)
    except docker.errors.APIError as exc:
        raise InfrastructureError(f"Could not pull {image} to verify it: {exc.explanation or exc}") from None
    labels = client.images.get(image).labels or {}
    models = sorted(json.loads(labels.get(MODELS_LABEL, "{}")))
    with tempfile.TemporaryDirectory() as tmp:
        root = checkout_at(model_repository, labels.get(REVISION_LABEL, ""), Path(tmp))
        repo = Repository.load(root or model_repository)
        names = [m for m in models if m in repo]
        if not names:
            raise UsageError(f"""
                None of the models in {image} ({", ".join(models) or "none listed in its labels"}) has golden
                cases here: its commit is not in this git repository and {model_repository} does not hold them.
                Fetch the history (fetch-depth: 0), or roll back without --verify.""")
        try:
            return test(repo, image, names, server_options=server_options)
        except Refused as exc:
            raise Refused(
                f"{image} fails its own golden cases; the channel was not moved. {exc.message}", result=exc.result
            ) from None
