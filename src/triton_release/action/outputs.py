"""The action's outputs, typed and checked before they are written to $GITHUB_OUTPUT; the step
summary is rendered by `summary.py`; `finish` writes both at the end of a run."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from triton_release.action.summary import summary
from triton_release.console import Console
from triton_release.contract import is_release_tag, parse_digest, parse_digest_ref, parse_tag_ref
from triton_release.session import Report


def _version(text: str) -> bool:
    """X.Y.Z, or empty."""
    return not text or is_release_tag(text)


def _digest(text: str) -> bool:
    """sha256:<64 hex>, or empty."""
    return not text or parse_digest(text) is not None


def _image(text: str) -> bool:
    """REPO:X.Y.Z, or empty."""
    return not text or ((found := parse_tag_ref(text)) is not None and is_release_tag(found[1]))


def _tag_ref(text: str) -> bool:
    """REPO:TAG."""
    return parse_tag_ref(text) is not None


_SHARD_KEYS = {"name": str, "models": str, "load": str, "cases": int, "gpu": bool}


def _done(report: Report, name: str) -> Any:  # the step's own result type: the name tells which
    """The result of step `name` when it finished; None when it did not run or failed."""
    record = report.steps.get(name)
    return record.result if record is not None and record.ok else None


def _tags_written(report: Report) -> tuple[str, ...]:
    """Every image tag this run wrote, as REPO:TAG, in the order written: the release's X.Y.Z and
    its moving tags (a release, a promote, a rerun finishing one), a rollback's channel, a stage's
    candidate tag. Records and evidence are not image tags and are left out."""
    written: list[tuple[str, str]] = []
    pushed, tagged, finished = _done(report, "push"), _done(report, "tags"), _done(report, "finish")
    if pushed is not None:
        written.append((pushed.repository, pushed.version))
    for result in (tagged, finished, _done(report, "promote")):
        if result is not None:
            written += [(result.repository, tag) for tag in result.tags]
    rolled = _done(report, "rollback")
    if rolled is not None and hasattr(rolled, "channel"):  # not a model's rollback on a server
        written.append((rolled.repository, rolled.channel))
    staged = _done(report, "candidate")
    if staged is not None and not staged.reused:
        written.append((staged.candidate.repository, staged.tag))
    return tuple(dict.fromkeys(f"{repository}:{tag}" for repository, tag in written))


def _previous(report: Report) -> tuple[str, str]:
    """The release before this one and its digest: as the registry had it when this release was
    tagged; else as the plan found it (a run that did not publish: no digest); a rollback: the
    digest its channel pointed at before, to roll forward with."""
    facts = report.facts
    if "previous_version" in facts:
        return str(facts.get("previous_version") or ""), str(facts.get("previous_digest") or "")
    rolled = _done(report, "rollback")
    if rolled is not None and hasattr(rolled, "channel"):
        return "", str(rolled.previous_digest or "")
    changed = report.result("changed")
    plan = getattr(changed, "plan", None)
    return (str(plan.previous or "") if plan is not None else ""), ""


@dataclass(frozen=True)
class ActionOutputs:
    """What the action's outputs promise (action.yml says each):

    - version: the release this run published or rolled back to (mode stage: the candidate's
      planned version, which promote takes as its input); empty otherwise
    - image, digest: REPO:X.Y.Z and its digest, of the release this run pushed, tagged or rolled
      back to
    - planned_version: the version the run planned, published or not (pull requests, push: false)
    - released: whether a release X.Y.Z was put in the registry by this run
    - tags: every image tag written, REPO:TAG, one per line (as docker/metadata-action's `tags`)
    - previous_version, previous_digest: the release before this one
    """

    version: str
    image: str
    digest: str
    changed_models: tuple[str, ...]
    report: str
    candidate: str = ""  # stage: REPO@sha256:... of the staged candidate
    shards: tuple[dict, ...] = ()  # stage: the matrix include list
    released: bool = False
    tags: tuple[str, ...] = ()
    previous_version: str = ""
    previous_digest: str = ""
    planned_version: str = ""

    @classmethod
    def from_report(cls, report: Report, report_path: str) -> ActionOutputs:
        facts = report.facts
        planned = str(facts.get("version") or "")
        released = facts.get("released") is True
        rolled = _done(report, "rollback")
        rolled_back = rolled is not None and hasattr(rolled, "channel")
        previous_version, previous_digest = _previous(report)
        return cls(
            planned if released or rolled_back or report.command == "stage" else "",
            str(facts.get("image") or ""),
            str(facts.get("digest") or ""),
            tuple(str(m) for m in facts.get("changed_models") or ()),
            report_path,
            str(facts.get("candidate") or ""),
            tuple(facts.get("shards") or ()),
            released,
            _tags_written(report),
            previous_version,
            previous_digest,
            planned,
        )

    def _shards_ok(self) -> bool:
        return all(
            isinstance(s, dict)
            and set(s) == set(_SHARD_KEYS)
            and all(type(s[key]) is kind for key, kind in _SHARD_KEYS.items())
            for s in self.shards
        )

    def _checks(self) -> list[tuple[str, bool, str]]:
        """(field, whether its value keeps its promise, the problem when it does not)."""
        return [
            ("version", _version(self.version), f"version {self.version!r} is not X.Y.Z"),
            (
                "planned_version",
                _version(self.planned_version),
                f"planned-version {self.planned_version!r} is not X.Y.Z",
            ),
            (
                "previous_version",
                _version(self.previous_version),
                f"previous-version {self.previous_version!r} is not X.Y.Z",
            ),
            ("image", _image(self.image), f"image {self.image!r} is not REPO:X.Y.Z"),
            ("digest", _digest(self.digest), f"digest {self.digest!r} is not a sha256 digest"),
            (
                "previous_digest",
                _digest(self.previous_digest),
                f"previous-digest {self.previous_digest!r} is not a sha256 digest",
            ),
            (
                "changed_models",
                not any("\n" in m for m in self.changed_models),
                "changed-models holds a name with a line break",
            ),
            ("tags", all(map(_tag_ref, self.tags)), "tags holds a value that is not REPO:TAG"),
            (
                "candidate",
                not self.candidate or parse_digest_ref(self.candidate) is not None,
                f"candidate {self.candidate!r} is not REPO@sha256:...",
            ),
            ("shards", self._shards_ok(), "shards is not a list of {name, models, load, cases, gpu}"),
        ]

    def problems(self) -> list[str]:
        """Values that are not what their output promises."""
        return [problem for _, ok, problem in self._checks() if not ok]

    def valid(self) -> ActionOutputs:
        """These outputs with every value that is not what it promises left empty (a list: only
        its entries that are)."""
        kept: dict = {}
        for name, ok, _ in self._checks():
            if ok:
                continue
            if name == "changed_models":
                kept[name] = tuple(m for m in self.changed_models if "\n" not in m)
            elif name == "tags":
                kept[name] = tuple(filter(_tag_ref, self.tags))
            else:
                kept[name] = type(getattr(self, name))()
        return replace(self, **kept)

    def values(self) -> dict[str, str]:
        return {
            "version": self.version,
            "image": self.image,
            "digest": self.digest,
            "changed-models": json.dumps(list(self.changed_models)),
            "report": self.report,
            "candidate": self.candidate,
            "shards": json.dumps(list(self.shards), separators=(",", ":")),
            "released": "true" if self.released else "false",
            "tags": "\n".join(self.tags),
            "previous-version": self.previous_version,
            "previous-digest": self.previous_digest,
            "planned-version": self.planned_version,
        }

    def write(self, path: str) -> None:
        """Append to $GITHUB_OUTPUT, each value between delimiters no value can contain."""
        with open(path, "a", encoding="utf-8") as out:
            for key, value in self.values().items():
                delimiter = f"triton_release_{uuid.uuid4().hex}"
                out.write(f"{key}<<{delimiter}\n{value}\n{delimiter}\n")


def finish(report: Report, report_path: str, env: Mapping[str, str], console: Console) -> None:
    """Outputs and the step summary; neither may fail the run."""
    if env.get("GITHUB_OUTPUT"):
        outputs = ActionOutputs.from_report(report, report_path)
        for problem in outputs.problems():
            console.warning(f"the action's output {problem}; it is left empty")
        try:
            outputs.valid().write(env["GITHUB_OUTPUT"])
        except OSError as exc:
            console.warning(f"the action's outputs could not be written ({exc.strerror})")
    if env.get("GITHUB_STEP_SUMMARY"):
        try:
            text = summary(report)
        except Exception as exc:  # the summary must never fail a release
            text = f"## triton-release\n\nThe summary could not be written ({exc!r}); see the report {report_path}.\n"
        try:
            with open(env["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            console.warning(f"the step summary could not be written ({exc.strerror})")
