"""A model's requirements.txt, read line by line (`read_requirements`): name==version requirements,
and a problem for each line that is something else; pip options, paths and URLs only when the
requirements_options setting allows them. A problem quotes its own line only, URL credentials hidden."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from triton_release.problems import Problem

REQUIREMENTS_OPTIONS = ("refuse", "allow")
_COMMENT = re.compile(r"(^|\s)#.*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # http:, git+https:, file:, c:
_CREDENTIALS = re.compile(r"(://)[^/@\s]*@")
_ARCHIVES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar.lz", ".tlz")
_ALLOW = (
    "write one requirement per line (name==version), or, if pip is meant to read the file as it is, set "
    "requirements_options: allow in triton-release.yaml"
)


def _shown(text: str) -> str:
    """The offending line as a message quotes it: URL credentials hidden, cut at 100 characters."""
    text = _CREDENTIALS.sub(r"\1***@", text)
    return repr(text if len(text) <= 100 else text[:100] + "...")


def _refused_kind(text: str) -> str | None:
    """What makes a requirements line more than a requirement (an option, a URL, a path), or None."""
    option = next((token for token in text.split() if token.startswith("-")), None)
    if option is not None:
        return f"the pip option {option.split('=')[0]!r}, which makes pip read other files or other package indexes"
    if "${" in text:
        return "an environment variable reference, which pip expands"
    if text.endswith("\\"):
        return "a line continued onto the next one"
    if _SCHEME.match(text) or "://" in text or re.search(r"\s@\s|@\s*\S+:", text):
        return "a URL, which pip would install from instead of the package index"
    name = re.split(r"[\s\[;<>=!~]", text, maxsplit=1)[0]
    if text.startswith((".", "/", "~", "\\")) or "/" in name or "\\" in name or name.lower().endswith(_ARCHIVES):
        return "a local path, which pip would read from this machine"
    return None


def read_requirements(path: Path, options: str = "refuse") -> tuple[list[tuple[int, Requirement]], list[Problem]]:
    """A model's requirements.txt: (line number, requirement) for each requirement, and a problem
    for each line that is not one. With options "allow", pip options, paths and URLs are left to
    pip (and not returned). A problem quotes its own line only, never the rest of the file."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return [], [Problem(path, "the file is not UTF-8 text; write one requirement per line (name==version)")]
    except OSError as exc:
        return [], [Problem(path, f"the file cannot be read ({exc.strerror})")]
    found: list[tuple[int, Requirement]] = []
    problems: list[Problem] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw).strip()
        if not line:
            continue
        kind = _refused_kind(line)
        if kind is not None:
            if options != "allow":
                problems.append(
                    Problem(
                        path,
                        f"{_shown(line)} is {kind}: refused in a model's requirements "
                        f'(requirements_options is "refuse"); {_ALLOW}',
                        number,
                    )
                )
            continue
        try:
            found.append((number, Requirement(line)))
        except InvalidRequirement as exc:
            reason = str(exc).splitlines()[0]
            problems.append(
                Problem(
                    path,
                    f"{_shown(line)} is not a requirement ({reason}); write it as name==version, one per line",
                    number,
                )
            )
    return found, problems
