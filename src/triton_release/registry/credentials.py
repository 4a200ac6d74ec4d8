"""Registry credentials: where they come from, in this order: the action's inputs,
TRITON_RELEASE_USERNAME and _PASSWORD, then the Docker config as the Docker CLI reads it (the
credential helper its `credHelpers` names for the registry, else its `credsStore`, then `auths`),
through the docker SDK. A helper that fails is a warning naming it, and the next source is read.
A repr that never shows the password; a helper gets the host on stdin, never a secret as an
argument."""

from __future__ import annotations

import logging
import shutil
import subprocess
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("triton_release")


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


def docker_config_path(env: Mapping[str, str]) -> Path:
    """The Docker config file: $DOCKER_CONFIG/config.json, else ~/.docker/config.json."""
    folder = Path(env.get("DOCKER_CONFIG") or Path(env.get("HOME") or Path.home()) / ".docker")
    return folder / "config.json"


def docker_config_credentials(host: str, env: Mapping[str, str]) -> Credentials | None:
    """The Docker config's credentials for the registry `host` (docker.io for Docker Hub, which the
    config keys as https://index.docker.io/v1/), as the Docker CLI finds them: the helper its
    `credHelpers` names for the host, else its `credsStore` (`docker-credential-NAME get`, the host
    on stdin, JSON out), then `auths`. A helper that fails is a warning naming it; `auths` is next."""
    import docker.auth
    import docker.errors

    path = docker_config_path(env)
    if not path.is_file():
        return None
    try:
        config = docker.auth.load_config(config_path=str(path))
    except docker.errors.DockerException as exc:  # an `auths` entry of the wrong shape
        log.warning(f"{path}: {exc}; its credentials are not used. Fix the file, or log in again (docker login).")
        return None
    helper, failure = config.get_credential_store(host), ""
    if helper:
        kind = "credHelpers" if config.cred_helpers.get(_config_key(host)) else "credsStore"
        source = f"docker-credential-{helper} ({kind} in {path})"
        try:
            found = _from_helper(helper, host, env, source)
        except _HelperFailed as failed:
            found, failure = None, f"The Docker credential helper {source} {failed} for {host}"
        if found is not None:
            return found
    entry = docker.auth.resolve_authconfig({"auths": config.auths}, host) or {}
    found = _from_entry(entry, f"auths in {path}", host)
    if failure:
        then = f"the registry is reached with {found.source}" if found else "the registry is reached anonymously"
        log.warning(
            f"{failure}, so its credentials are not used: {then}. Install or repair the helper (try "
            f"`echo {_config_key(host)} | docker-credential-{helper} get`), or give credentials "
            "another way (TRITON_RELEASE_USERNAME and TRITON_RELEASE_PASSWORD)."
        )
    return found


def _config_key(host: str) -> str:
    """How the Docker config keys a registry's credentials: Docker Hub by its old index URL."""
    import docker.auth

    return docker.auth.INDEX_URL if host == docker.auth.INDEX_NAME else host


class _HelperFailed(Exception):
    """What went wrong with a credential helper, in words that hold none of its output's secrets."""


def _from_helper(helper: str, host: str, env: Mapping[str, str], source: str) -> Credentials | None:
    """`docker-credential-<helper> get` for `host`: its credentials; None when it has none."""
    import docker.credentials

    with warnings.catch_warnings():  # a helper not found is said once, by the caller's warning
        warnings.simplefilter("ignore")
        store = docker.credentials.Store(helper, environment=dict(env))
    store.exe = shutil.which(store.program, path=env.get("PATH"))  # the PATH given, not this process's
    if store.exe is None:
        raise _HelperFailed("is not installed or not on PATH")
    try:
        data = store.get(_config_key(host))
    except docker.credentials.CredentialsNotFound:
        return None
    except docker.credentials.StoreError as exc:
        said = exc.__cause__.output if isinstance(exc.__cause__, subprocess.CalledProcessError) else b""
        first = (said or b"").decode(errors="replace").strip().splitlines()[:1]
        message = f": {first[0][:200]}" if first else ""
        status = getattr(exc.__cause__, "returncode", None)
        raise _HelperFailed(f"failed (exit status {status}{message})" if status is not None else "failed") from None
    except (ValueError, KeyError, TypeError, AttributeError):  # not JSON, or not credentials: never shown
        raise _HelperFailed("answered with something that is not credentials (JSON with Username and Secret)") from None
    if not isinstance(data, dict):
        raise _HelperFailed("answered with something that is not credentials (JSON with Username and Secret)")
    return _from_entry({"Username": data.get("Username"), "Password": data.get("Secret")}, source, host)


def _from_entry(entry: Mapping[str, object], source: str, host: str) -> Credentials | None:
    """Credentials from the docker SDK's auth entry (`auths`' keys are lower case, a store's capitalized)."""
    username = entry.get("username") or entry.get("Username")
    password = entry.get("password") or entry.get("Password")
    if entry.get("IdentityToken") or username == "<token>":
        log.warning(
            f"{source} holds an identity token for {host} (a refresh token for OAuth), which this tool cannot "
            "use, so it is not used. Give a username and a password or access token instead "
            "(TRITON_RELEASE_USERNAME and TRITON_RELEASE_PASSWORD, or `docker login -u USER`)."
        )
        return None
    if isinstance(username, str) and isinstance(password, str) and username and password:
        return Credentials(username, password, source)
    return None


ENV_NAMES = ("TRITON_RELEASE_USERNAME", "TRITON_RELEASE_PASSWORD")
INPUT_NAMES = ("the action's input username", "the action's input password")


# What a lone half of a pair does, in the words the warning, docs/cli.md and docs/action.md share.
UNPAIRED_RULE = (
    "a registry login needs both, so neither is used: the next source of credentials is read, else the "
    "registry is reached anonymously (ghcr.io then refuses a push: 401 Unauthorized)"
)


def half_given(username: str | None, password: str | None, names: tuple[str, str]) -> str | None:
    """The warning for a username without a password or a password without a username (`names`
    says what each is called), naming the missing one; None when both or neither are given."""
    if bool(username) == bool(password):
        return None
    given, missing = names if username else names[::-1]
    return f"{given} is given without {missing}: {UNPAIRED_RULE}. Give {missing} too, or neither."


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
    """Given ones (action inputs), else TRITON_RELEASE_USERNAME/_PASSWORD, else the Docker config
    (`docker_config_credentials`); None: anonymous. `host` is the registry as Docker names it
    (docker.io for Docker Hub). A lone half of a pair is not used (`unpaired_credentials` says so
    at the door)."""
    if username and password:
        return Credentials(username, password, "inputs")
    user, secret = env.get(ENV_NAMES[0]), env.get(ENV_NAMES[1])
    if user and secret:
        return Credentials(user, secret, "TRITON_RELEASE_USERNAME/_PASSWORD")
    return docker_config_credentials(host, env)
