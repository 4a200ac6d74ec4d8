"""Docker credential helpers for tests: `docker-credential-NAME` scripts speaking the helper
protocol (`get`, the server on stdin, {"Username", "Secret"} JSON on stdout; a server it does not
know: "credentials not found in native keychain", exit 1), and a Docker config naming them."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

HELPER = """#!{python}
import json, sys
from pathlib import Path

known = {known!r}
server = sys.stdin.read().strip()
Path({record!r}).open("a").write(json.dumps({{"argv": sys.argv[1:], "stdin": server}}) + "\\n")
if {behaviour!r} == "fail":
    print("helper error: the keychain is locked")
    sys.exit(3)
if {behaviour!r} == "garbage":
    print("not json " + " ".join(secret for _, secret in known.values()))
    sys.exit(0)
if sys.argv[1:] != ["get"] or server not in known:
    print("credentials not found in native keychain")
    sys.exit(1)
username, secret = known[server]
print(json.dumps({{"ServerURL": server, "Username": username, "Secret": secret}}))
"""


def write_helper(folder: Path, name: str, known: dict[str, tuple[str, str]], *, behaviour: str = "answer") -> Path:
    """`folder`/docker-credential-`name`, knowing `known` (server -> (username, secret)); with
    `behaviour` "fail" it exits 3 with a message, with "garbage" it prints what is not JSON (its
    secrets among it). Each call appends {"argv", "stdin"} to `folder`/`name`.calls."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"docker-credential-{name}"
    record = str(folder / f"{name}.calls")
    path.write_text(HELPER.format(python=sys.executable, known=known, record=record, behaviour=behaviour))
    path.chmod(0o755)
    return path


def helper_calls(folder: Path, name: str) -> list[dict]:
    calls = folder / f"{name}.calls"
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.is_file() else []


def write_docker_config(
    folder: Path,
    *,
    auths: dict[str, tuple[str, str] | dict] | None = None,
    creds_store: str | None = None,
    cred_helpers: dict[str, str] | None = None,
) -> Path:
    """`folder`/config.json as `docker login` leaves it: `auths` (server -> (user, password), or a
    raw entry), `credsStore`, `credHelpers`."""
    folder.mkdir(parents=True, exist_ok=True)
    config: dict = {"auths": {}}
    for server, entry in (auths or {}).items():
        if isinstance(entry, tuple):
            entry = {"auth": base64.b64encode(f"{entry[0]}:{entry[1]}".encode()).decode()}
        config["auths"][server] = entry
    if creds_store:
        config["credsStore"] = creds_store
    if cred_helpers:
        config["credHelpers"] = cred_helpers
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path
