"""Shard results: the outcome of one shard's golden cases, kept in the registry beside the
candidate it tested.

A shard result is a small OCI artifact in the release repository, tagged
`sha256-<hex of the candidate's digest>.golden-<shard>`: a manifest whose config is the result
(JSON, media type SHARD_RESULT_TYPE, also its `artifactType`) and whose one layer is the shard's JUnit
XML (an empty JSON layer when there is none). The registry is the one place every runner of a
matrix can reach, so the test jobs write their results there and `promote` reads them.

A shard result states what was planned and what ran: the golden cases the shard's plan holds of each
model, the cases run (each by name, passed or not), and the models set aside because they need a
GPU the runner lacks. A result whose cases all passed can still have tested less than planned;
`untested` says what, and promote refuses it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from triton_release.contract import shard_result_tag
from triton_release.errors import Refused
from triton_release.registry.client import Manifest, RegistryRepository, artifact_config

SHARD_RESULT_TYPE = "application/vnd.triton-release.golden.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
JUNIT_TYPE = "application/xml"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"


@dataclass(frozen=True)
class ShardResult:
    candidate: str  # sha256:... the candidate manifest digest
    shard: str
    models: tuple[str, ...]  # the models the shard tested
    passed: bool
    cases: tuple[dict, ...]  # {"case": "a/basic", "passed": true}
    revision: str  # the commit
    reason: str = ""  # why a shard failed when no case did (a drift beyond max-drift, a load)
    planned_cases: tuple[tuple[str, int], ...] | None = None  # model -> the golden cases the plan holds of it
    needs_gpu: tuple[tuple[str, str], ...] = ()  # (model, why): set aside, it did not load on the CPU

    @property
    def failed_cases(self) -> list[str]:
        return [str(case.get("case", "?")) for case in self.cases if not case.get("passed")]

    def ran(self) -> Counter:
        """Model -> the cases of it that ran (a case is named <model>/<case>)."""
        return Counter(str(case.get("case", "")).split("/", 1)[0] for case in self.cases)

    def untested(self, planned: Mapping[str, int]) -> list[tuple[str, int, int, str]]:
        """(model, cases run, cases planned, why it did not run: "" or the GPU it needs) of each of
        the record's models that ran fewer golden cases than `planned` holds of it, or was set
        aside for lacking a GPU, in the record's order."""
        ran, aside = self.ran(), dict(self.needs_gpu)
        return [
            (model, ran[model], planned.get(model, 0), aside.get(model, ""))
            for model in self.models
            if model in aside or ran[model] < planned.get(model, 0)
        ]

    def to_json(self) -> dict:
        data = {
            "candidate": self.candidate,
            "shard": self.shard,
            "models": list(self.models),
            "passed": self.passed,
            "cases": [dict(case) for case in self.cases],
            "revision": self.revision,
            "cases_run": len(self.cases),
            **({"reason": self.reason} if self.reason else {}),
        }
        if self.planned_cases is not None:
            data["planned_cases"] = dict(self.planned_cases)
        if self.needs_gpu:
            data["needs_gpu"] = dict(self.needs_gpu)
        return data

    @classmethod
    def from_json(cls, data: object) -> ShardResult:
        """The record `data` holds; ValueError naming what is wrong when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        wanted = {"candidate": str, "shard": str, "models": list, "passed": bool, "cases": list, "revision": str}
        for key, kind in wanted.items():
            if not isinstance(data.get(key), kind):
                raise ValueError(f"{key!r} is missing or not a {kind.__name__}")
        if not all(isinstance(m, str) for m in data["models"]):
            raise ValueError("'models' is not a list of names")
        if not all(
            isinstance(c, dict) and isinstance(c.get("case"), str) and isinstance(c.get("passed"), bool)
            for c in data["cases"]
        ):
            raise ValueError("'cases' is not a list of {case, passed}")
        if "cases_run" in data and data["cases_run"] != len(data["cases"]):
            raise ValueError(f"'cases_run' is {data['cases_run']!r}, and 'cases' lists {len(data['cases'])}")
        planned = data.get("planned_cases")
        if planned is not None and not (
            isinstance(planned, dict)
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in planned.values())
        ):
            raise ValueError("'planned_cases' is not an object of model -> a count")
        aside = data.get("needs_gpu") or {}
        if not isinstance(aside, dict) or not all(isinstance(why, str) for why in aside.values()):
            raise ValueError("'needs_gpu' is not an object of model -> why")
        return cls(
            data["candidate"],
            data["shard"],
            tuple(data["models"]),
            data["passed"],
            tuple(dict(c) for c in data["cases"]),
            data["revision"],
            str(data.get("reason") or ""),
            tuple(planned.items()) if planned is not None else None,
            tuple(aside.items()),
        )


def write_shard_result(registry: RegistryRepository, record: ShardResult, junit: bytes | None = None) -> str:
    """Put `record` (and the shard's JUnit XML) in the registry under its tag; returns the tag.
    A record written again (a rerun of the shard) replaces the earlier one."""
    tag = shard_result_tag(record.candidate, record.shard)
    config = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")).encode()
    layer, layer_type = (junit, JUNIT_TYPE) if junit is not None else (EMPTY, EMPTY_TYPE)
    descriptor = {"mediaType": layer_type, "digest": registry.put_blob(layer), "size": len(layer)}
    if junit is not None:
        descriptor["annotations"] = {"org.opencontainers.image.title": f"{record.shard}.junit.xml"}
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": SHARD_RESULT_TYPE,
        "config": {"mediaType": SHARD_RESULT_TYPE, "digest": registry.put_blob(config), "size": len(config)},
        "layers": [descriptor],
    }
    registry.put_manifest(tag, Manifest.of(OCI_MANIFEST, json.dumps(manifest, separators=(",", ":")).encode()))
    return tag


def read_shard_result(registry: RegistryRepository, candidate: str, shard: str) -> ShardResult | None:
    """The record of `shard` for `candidate`; None when there is none. Something under the
    record's tag that is not a readable record is refused, naming the tag."""
    tag = shard_result_tag(candidate, shard)
    manifest = registry.manifest(tag)
    if manifest is None:
        return None

    def unreadable(why: str) -> Refused:
        return Refused(f"""
            {registry}:{tag} is not a shard result this version can read ({why}). Run the test job of
            {shard} again: it writes the result anew.""")

    try:
        return ShardResult.from_json(json.loads(artifact_config(registry, manifest, SHARD_RESULT_TYPE)))
    except ValueError as exc:  # also UnicodeDecodeError
        raise unreadable(str(exc)) from None
