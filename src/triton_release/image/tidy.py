"""What a release leaves on the Docker daemon, and what it removes once it is done.

Each build is put together under one local tag per registry repository (`REPO:candidate`), and the
next build reads that image back: its layer order, and the layers the daemon already holds, so a
one-model change sends the daemon one small tar (image/build.py). That image is kept, with the base
image; together they hold every layer the next release reuses. Everything else a release makes is
removed once it is done, by its exact id or tag and never by a prune (other work may share the
daemon):

- the build the new one replaced under the tag, left untagged (`<none>`), as the build ends;
- the tested build, once the release relabeled it with its served signatures (a new image, the
  same layers) and its test server is gone;
- the `REPO:X.Y.Z` tag the daemon's push needed, once X.Y.Z is in the registry.

An image still tagged elsewhere or used by a container is left, and said so: it is not ours to
remove, or not yet. A removal that fails is a note in the result, never a failed release."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import docker
import requests


@dataclass(frozen=True)
class Tidied:
    """What was removed from the daemon: tags untagged, untagged images removed (ids), and each image
    left with the reason."""

    untagged: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    left: tuple[tuple[str, str], ...] = ()  # (image id or tag, why it was left)
    kept: str = ""  # the build's tag, kept: the next build's layers

    def __add__(self, other: Tidied) -> Tidied:
        return Tidied(
            self.untagged + other.untagged,
            self.removed + other.removed,
            self.left + other.left,
            self.kept or other.kept,
        )

    def to_json(self) -> dict:
        return {
            "untagged": list(self.untagged),
            "removed": list(self.removed),
            "left": [{"image": image, "because": why} for image, why in self.left],
            "kept": self.kept,
        }


def image_id_of(client: docker.DockerClient, reference: str) -> str | None:
    """The id of the image `reference` names on the daemon; None when there is none."""
    try:
        return str(client.api.inspect_image(reference)["Id"])
    except docker.errors.NotFound:
        return None


def remove_untagged(client: docker.DockerClient, image_ids: Iterable[str], keep: Iterable[str] = ()) -> Tidied:
    """Remove each of `image_ids` (but `keep`) that no tag names any more; never by force: one a
    container still uses, or that is tagged (here or in another repository), is left, with why."""
    kept = set(keep)
    removed, left = [], []
    for image_id in dict.fromkeys(i for i in image_ids if i and i not in kept):
        try:
            tags = [t for t in client.api.inspect_image(image_id).get("RepoTags") or () if t != "<none>:<none>"]
        except docker.errors.NotFound:
            continue  # gone already
        except (docker.errors.APIError, requests.RequestException) as exc:
            left.append((image_id, f"could not be inspected: {exc}"))
            continue
        if tags:
            left.append((image_id, f"still tagged {', '.join(sorted(tags))}"))
            continue
        try:
            client.api.remove_image(image_id, force=False, noprune=False)
            removed.append(image_id)
        except docker.errors.NotFound:
            continue
        except (docker.errors.APIError, requests.RequestException) as exc:
            left.append((image_id, _why(exc)))
    return Tidied(removed=tuple(removed), left=tuple(left))


def untag(client: docker.DockerClient, tag: str, image_id: str) -> Tidied:
    """Remove the tag `tag` when it names `image_id` (the image stays while another tag names it)."""
    found = image_id_of(client, tag)
    if found is None:
        return Tidied()
    if found != image_id:
        return Tidied(left=((tag, f"names {found[:19]}, not this release's image"),))
    try:
        client.api.remove_image(tag, force=False, noprune=True)
    except docker.errors.NotFound:
        return Tidied()
    except (docker.errors.APIError, requests.RequestException) as exc:
        return Tidied(left=((tag, _why(exc)),))
    return Tidied(untagged=(tag,))


def _why(exc: Exception) -> str:
    text = str(getattr(exc, "explanation", None) or exc)
    return "used by a container" if "container" in text else text
