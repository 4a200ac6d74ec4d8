"""Registry credentials: where they come from (the action's inputs, TRITON_RELEASE_USERNAME and
_PASSWORD, the Docker config's `auths`), and a repr that never shows the password."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str = ""  # where they came from, for messages

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=***, source={self.source!r})"

    def docker_auth(self) -> dict:
        """The auth config the Docker API takes (sent in a header, never as an argument)."""
        return {"username": self.username, "password": self.password}


def docker_config_credentials(host: str, env: Mapping[str, str]) -> Credentials | None:
    """`auths` of the Docker config file ($DOCKER_CONFIG/config.json or ~/.docker/config.json)."""
    folder = Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME") or Path.home()) / ".docker")
    path = folder / "config.json"
    try:
        auths = json.loads(path.read_text()).get("auths", {})
    except (OSError, ValueError):
        return None
    for key in (host, f"https://{host}", f"http://{host}", f"https://{host}/v1/"):
        entry = auths.get(key)
        if entry and entry.get("auth"):
            try:
                user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                continue
            return Credentials(user, password, str(path))
    return None


ENV_NAMES = ("TRITON_RELEASE_USERNAME", "TRITON_RELEASE_PASSWORD")
INPUT_NAMES = ("the action's input username", "the action's input password")


def half_given(username: str | None, password: str | None, names: tuple[str, str]) -> str | None:
    """The warning for a username without a password or a password without a username (`names`
    says what each is called), naming the missing one; None when both or neither are given."""
    if bool(username) == bool(password):
        return None
    given, missing = names if username else names[::-1]
    return (
        f"{given} is given without {missing}: a registry login needs both, so neither is used and the "
        f"registry is reached anonymously (ghcr.io then refuses a push: 401 Unauthorized). Give {missing} "
        "too, or neither."
    )


def unpaired_credentials(
    env: Mapping[str, str],
    username: str | None = None,
    password: str | None = None,
    names: tuple[str, str] = INPUT_NAMES,
) -> list[str]:
    """The warnings for the given pair (the action's inputs) and TRITON_RELEASE_USERNAME/_PASSWORD
    when either holds only one half."""
    found = (half_given(username, password, names), half_given(env.get(ENV_NAMES[0]), env.get(ENV_NAMES[1]), ENV_NAMES))
    return [warning for warning in found if warning]


def find_credentials(
    host: str, env: Mapping[str, str], username: str | None = None, password: str | None = None
) -> Credentials | None:
    """Given ones (action inputs), else TRITON_RELEASE_USERNAME/_PASSWORD, else the Docker config.
    A lone half of a pair is not used (`unpaired_credentials` says so at the door)."""
    if username and password:
        return Credentials(username, password, "inputs")
    user, secret = env.get(ENV_NAMES[0]), env.get(ENV_NAMES[1])
    if user and secret:
        return Credentials(user, secret, "TRITON_RELEASE_USERNAME/_PASSWORD")
    return docker_config_credentials(host, env)
