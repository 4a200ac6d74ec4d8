"""The in-toto Statements (v1) of a release, each about the pushed manifest digest: the golden
results (a predicate of this tool's own), the same cases as in-toto's Test Results (v0.1), SLSA
provenance v1, and the CycloneDX SBOM (sbom.py).

Everything here is a pure function of what the run found; no Docker, no registry. The golden
predicate, version 1 (`GOLDEN_TYPE`):

- `passed`: every golden case that ran passed (what an admission policy tests), `cases`,
  `failed`: counts; `tool`, `triton`: the versions; `image`: the manifest and config digests of
  the image the cases ran against (the config digest is the local image's id: the one tested);
- `models`: per model and version, every case: name, passed, latency, the sha256 of the case
  file and of the canonical JSON (sorted keys, no spaces) of its inputs and of its expected
  outputs, the tolerances each output was compared with, the largest differences;
- `tested_on_cpu`: KIND_GPU models loaded on the CPU; `not_tested`: every model of the image
  whose cases did not run here, and why (needs a GPU, no golden cases, unchanged since the
  release before, loaded only as another model's step);
- `drift` and `latency`, where the run measured them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from triton_release import __version__
from triton_release.contract import digest_hex, parse_digest_ref
from triton_release.evidence.signing import Signing

if TYPE_CHECKING:
    from triton_release.models.suite import GoldenRun

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
BUILD_TYPE = "https://triton-release.dev/build/v1"
CLI_BUILDER = "https://triton-release.dev/builder/cli"
ACTION_BUILDER = "https://triton-release.dev/builder/github-action"
# the GitHub run, from the environment: these variables only (never the environment at large)
GITHUB_FIELDS = {
    "GITHUB_REPOSITORY": "repository",
    "GITHUB_RUN_ID": "run_id",
    "GITHUB_RUN_ATTEMPT": "run_attempt",
    "GITHUB_WORKFLOW_REF": "workflow_ref",
    "GITHUB_SHA": "sha",
    "GITHUB_REF": "ref",
    "GITHUB_EVENT_NAME": "event_name",
    "GITHUB_ACTOR": "actor",
    "RUNNER_ENVIRONMENT": "runner_environment",
}


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def statement(name: str, digest: str, predicate_type: str, predicate: dict) -> bytes:
    """The Statement's bytes (the DSSE payload): about the manifest `digest` of repository `name`."""
    return canonical(
        {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": name, "digest": {"sha256": digest_hex(digest)}}],
            "predicateType": predicate_type,
            "predicate": predicate,
        }
    )


@dataclass(frozen=True)
class Invocation:
    """Who built, and the GitHub run when there is one: the named variables only."""

    builder_id: str
    github: Mapping[str, str] = field(default_factory=dict)
    server: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str], action: bool = False) -> Invocation:
        """`action`: the run is the GitHub Action's (else the CLI's, maybe inside a workflow)."""
        server = env.get("GITHUB_SERVER_URL", "https://github.com") if env.get("GITHUB_ACTIONS") == "true" else ""
        github = {name: env[key] for key, name in GITHUB_FIELDS.items() if env.get(key)} if server else {}
        repository, ref = env.get("GITHUB_ACTION_REPOSITORY", ""), env.get("GITHUB_ACTION_REF", "")
        if repository:
            builder = f"{server or 'https://github.com'}/{repository}{'@' + ref if ref else ''}"
        else:
            builder = ACTION_BUILDER if action else CLI_BUILDER
        return cls(builder, github, server)

    @property
    def run_url(self) -> str:
        run, repository = self.github.get("run_id"), self.github.get("repository")
        if not (run and repository):
            return ""
        attempt = self.github.get("run_attempt")
        return f"{self.server}/{repository}/actions/runs/{run}" + (f"/attempts/{attempt}" if attempt else "")


@dataclass(frozen=True)
class EvidenceOptions:
    """What a run that signs carries to its evidence: its signing (prepared at the door: the key
    read and checked before the first side effect), who built it and the GitHub run, and the
    settings the provenance records (never a credential, a key or the environment). The default:
    unsigned, built by the CLI, recording no settings."""

    signing: Signing = field(default_factory=lambda: Signing("none"))
    invocation: Invocation = Invocation(CLI_BUILDER)
    settings: Mapping[str, Any] = field(default_factory=dict)


# -- golden results -------------------------------------------------------------------------------


def _inputs_and_outputs(raw: dict) -> tuple[Any, Any]:
    if isinstance(raw.get("sequence"), list):
        steps = [s for s in raw["sequence"] if isinstance(s, dict)]
        return ([s.get("inputs") for s in steps], [{k: s[k] for k in ("outputs", "error") if k in s} for s in steps])
    return raw.get("inputs"), {k: raw[k] for k in ("outputs", "error") if k in raw}


def _expected_tensors(raw: dict) -> list[dict]:
    """Every expected output tensor of a case file: of its outputs (a decoupled model's list of
    responses included) and of each step of a sequence."""
    parts = (
        [s.get("outputs") for s in raw["sequence"] if isinstance(s, dict)]
        if isinstance(raw.get("sequence"), list)
        else [raw.get("outputs")]
    )
    found: list[dict] = []
    for part in parts:
        for item in part if isinstance(part, list) else []:
            found += [t for t in (item if isinstance(item, list) else [item]) if isinstance(t, dict)]
    return found


def _tolerances(raw: dict) -> dict[str, dict]:
    """Output name -> the tolerances it was compared with (as models/answers.py does)."""
    from triton_release.models.tensors import FLOATS

    found = {}
    for tensor in _expected_tensors(raw):
        datatype = str(tensor.get("datatype", ""))
        if datatype in FLOATS:
            default = FLOATS[datatype]
            found[str(tensor.get("name"))] = {
                "datatype": datatype,
                "atol": raw.get("atol", default),
                "rtol": raw.get("rtol", default),
            }
        else:
            found[str(tensor.get("name"))] = {"datatype": datatype, "exact": True}
    return found


def case_entry(result: Any, content: bytes | None) -> dict:
    """One case: its outcome, and what it sent and expected by digest (`content`: the case file
    as released, None when it could not be read)."""
    entry: dict = {
        "name": result.case.split("/", 1)[1],
        "passed": bool(result.passed),
        "latency_ms": round(float(result.latency_ms), 3),
    }
    if result.message and not result.passed:
        entry["message"] = result.message[:500]
    try:
        raw = json.loads(content) if content is not None else None
    except ValueError:
        raw = None
    if isinstance(raw, dict):
        inputs, outputs = _inputs_and_outputs(raw)
        entry.update(
            {
                "file_sha256": sha256(content or b""),
                "inputs_sha256": sha256(canonical(inputs)),
                "outputs_sha256": sha256(canonical(outputs)),
                "protocol": raw.get("protocol", "http"),
                "tolerances": _tolerances(raw),
            }
        )
    else:
        entry["digests"] = "not recorded: the case file could not be read as released"
    entry["outputs"] = [
        {k: v for k, v in o.to_json().items() if k != "message"}  # "Infinity" for an infinite difference
        for o in result.outputs
    ]
    if result.steps:
        entry.update({"steps": result.steps, "steps_passed": result.steps_passed})
    return entry


def _case_version(content: bytes | None, newest: int | None) -> int | None:
    try:
        raw = json.loads(content) if content is not None else {}
    except ValueError:
        raw = {}
    version = raw.get("version") if isinstance(raw, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else newest


def golden_predicate(
    *,
    image: str,
    digest: str,
    config_digest: str,
    triton: str,
    models: Mapping[str, list[int]],
    run: GoldenRun | None,
    case_files: Mapping[str, bytes | None],
    tested: Iterable[str] = (),
    previous: str | None = None,
    latency: Any = None,
    how: str = "release",
) -> dict:
    """The golden predicate of a run (None: nothing had to be tested) against `image`.
    `models`: the image's models and versions; `tested`: the models the run was asked to test;
    `case_files`: each case (<model>/<name>) -> its file as released."""
    cases = list(run.cases) if run is not None else []
    newest = {name: max(versions) if versions else None for name, versions in models.items()}
    by_model: dict[str, dict[int | None, list[dict]]] = {}
    for result in cases:
        model = result.case.split("/", 1)[0]
        content = case_files.get(result.case)
        by_model.setdefault(model, {}).setdefault(_case_version(content, newest.get(model)), []).append(
            case_entry(result, content)
        )
    aside = dict(run.needs_gpu) if run is not None else {}
    no_cases = set(run.untested) if run is not None else set()
    loaded = set(run.loaded) if run is not None else set()
    asked = set(tested)
    not_tested = []
    for name in sorted(set(models) | aside.keys()):
        if name in by_model:
            continue
        if name in aside:
            why = f"needs a GPU, which the test server did not have: {aside[name]}"
        elif name in no_cases:
            why = "it has no golden cases (it loaded and was ready)"
        elif name in loaded and name not in asked:
            why = "loaded as a model another one needs; its own cases run when it changes"
        elif name in asked:
            why = "none of its golden cases ran"
        else:
            why = f"unchanged since {previous}, whose release tested it" if previous else "not changed"
        not_tested.append({"model": name, "why": why})
    failed = sum(1 for c in cases if not c.passed)
    predicate: dict = {
        "version": 1,
        "how": how,
        "passed": failed == 0 and (run is None or run.passed),
        "cases": len(cases),
        "failed": failed,
        "tool": {"name": "triton-release", "version": __version__},
        "triton": {"version": triton},
        "image": {
            "name": image,
            "digest": digest,
            "config_digest": config_digest,
            "tested_image": run.image if run is not None else None,
        },
        "models": [
            {"model": model, "version": version, "cases": entries}
            for model, versions in sorted(by_model.items())
            for version, entries in sorted(versions.items(), key=lambda item: item[0] or 0)
        ],
        "tested_on_cpu": sorted(run.on_cpu) if run is not None else [],
        "not_tested": not_tested,
        "drift": [d.to_json() for d in run.drift] if run is not None else [],
    }
    latency = latency if latency is not None else getattr(run, "latency", None)  # the latency gate's figures
    if latency is not None:
        predicate["latency"] = latency.to_json() if hasattr(latency, "to_json") else latency
    return predicate


def golden_from_records(
    *,
    image: str,
    digest: str,
    records: Iterable[Any],
    models: Mapping[str, list[int]],
    untested: Iterable[tuple[str, str]] = (),
    triton: str = "",
) -> dict:
    """The golden predicate of a promoted candidate, from its shards' results (registry/candidate/shard_results.py):
    each case by name and outcome; their digests are not recorded by the shards."""
    entries: dict[str, list[dict]] = {}
    aside: dict[str, str] = dict(untested)
    shards = []
    for record in records:
        shards.append(
            {
                "shard": record.shard,
                "passed": record.passed,
                "revision": record.revision,
                **({"reason": record.reason} if record.reason else {}),
            }
        )
        for case in record.cases:
            model, _, name = str(case.get("case", "")).partition("/")
            entries.setdefault(model, []).append({"name": name, "passed": bool(case.get("passed"))})
        aside.update(dict(record.needs_gpu))
    newest = {name: max(versions) if versions else None for name, versions in models.items()}
    failed = sum(1 for cases in entries.values() for case in cases if not case["passed"])
    not_tested = [
        {
            "model": name,
            "why": f"needs a GPU, which its shard's runner did not have: {aside[name]}"
            if name in aside
            else "unchanged since the release before, or no golden cases",
        }
        for name in sorted(set(models) | set(aside))
        if name not in entries
    ]
    return {
        "version": 1,
        "how": "promote: the shards' golden records",
        "passed": failed == 0 and all(s["passed"] for s in shards),
        "cases": sum(len(c) for c in entries.values()),
        "failed": failed,
        "tool": {"name": "triton-release", "version": __version__},
        "triton": {"version": triton},
        "image": {"name": image, "digest": digest},
        "shards": shards,
        "models": [
            {"model": model, "version": newest.get(model), "cases": cases} for model, cases in sorted(entries.items())
        ],
        "tested_on_cpu": [],
        "not_tested": not_tested,
        "drift": [],
    }


# -- test results: in-toto's vetted predicate (in-toto/attestation spec/predicates/test-results.md)


def tests_predicate(
    *,
    passed: Iterable[str],
    failed: Iterable[str],
    warned: Iterable[str] = (),
    configuration: Iterable[tuple[str, str]] = (),
    url: str = "",
    all_passed: bool = True,
) -> dict:
    """in-toto's Test Results predicate, made with the in-toto-attestation bindings: `result` is
    "fail" when a test failed or the golden results say the run did not pass (`all_passed`), else
    "pass"; `configuration`: (path in the repository, git blob id) of each case file that ran;
    `url`: the run ("" leaves it out). The three lists are always written, empty or not."""
    from google.protobuf import json_format
    from in_toto_attestation.predicates.test_result.v0.test_result_pb2 import TestResult
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor

    descriptors = []
    for path, blob in sorted(set(configuration)):
        descriptor = ResourceDescriptor(name=path, digest={"gitBlob": blob})
        descriptor.validate()
        descriptors.append(descriptor.pb)
    failures = sorted(set(failed))
    message = TestResult(
        result="pass" if all_passed and not failures else "fail",
        configuration=descriptors,
        url=url,
        passed_tests=sorted(set(passed)),
        warned_tests=sorted(set(warned)),
        failed_tests=failures,
    )
    predicate = json_format.MessageToDict(message)
    for key in ("passedTests", "warnedTests", "failedTests"):
        predicate.setdefault(key, [])
    predicate.setdefault("configuration", [])
    return predicate


def tests_of_run(
    run: GoldenRun | None, *, configuration: Iterable[tuple[str, str]], url: str, all_passed: bool
) -> dict:
    """The Test Results of a golden run: each case `<model>/<case>` passed or failed, and each model
    set aside for needing a GPU the test server lacked (KIND_GPU, not loadable on the CPU) warned,
    by its name: none of its cases ran."""
    cases = list(run.cases) if run is not None else []
    return tests_predicate(
        passed=[c.case for c in cases if c.passed],
        failed=[c.case for c in cases if not c.passed],
        warned=[name for name, _ in run.needs_gpu] if run is not None else [],
        configuration=configuration,
        url=url,
        all_passed=all_passed,
    )


def tests_of_records(
    records: Iterable[Any],
    *,
    untested: Iterable[tuple[str, str]] = (),
    configuration: Iterable[tuple[str, str]] = (),
    url: str = "",
    all_passed: bool = True,
) -> dict:
    """The Test Results of a promoted candidate, from its shards' records: each case by name and
    outcome; each model a shard set aside for lacking a GPU (or promote let ship untested) warned."""
    passed: list[str] = []
    failed: list[str] = []
    warned = {name for name, _ in untested}
    for record in records:
        for case in record.cases:
            (passed if case.get("passed") else failed).append(str(case.get("case", "")))
        warned |= {name for name, _ in record.needs_gpu}
    ran = {name.split("/", 1)[0] for name in passed + failed}
    return tests_predicate(
        passed=passed,
        failed=failed,
        warned=sorted(warned - ran),
        configuration=configuration,
        url=url,
        all_passed=all_passed,
    )


def tests_statement(name: str, digest: str, predicate: dict) -> bytes:
    """The Test Results Statement's bytes about `name`@`digest`, built and checked with the
    in-toto-attestation bindings (a subject with a digest, a predicate type, a predicate), written
    as canonically as the others."""
    from google.protobuf import json_format
    from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
    from in_toto_attestation.v1.statement import Statement

    from triton_release.contract import TEST_RESULT_TYPE

    subject = ResourceDescriptor(name=name, digest={"sha256": digest_hex(digest)})
    made = Statement([subject.pb], TEST_RESULT_TYPE, predicate)
    made.validate()
    return canonical(json_format.MessageToDict(made.pb))


# -- provenance -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildFacts:
    """What the image was built from and how."""

    revision: str
    source: str  # the source repository's URL ("" when unknown)
    base_image: str
    base_image_id: str
    base_repo_digests: tuple[str, ...]
    stub: Mapping[str, Any]  # provider, origin, mode, Pythons, the stub file's sha256
    settings: Mapping[str, Any]  # the settings that shaped the build and the test
    wheels: tuple[tuple[str, str, str], ...] = ()  # (name, version, sha256) of the environments' wheels
    created: str = ""  # the image's created label: when it was built
    version: str = ""
    bumped_from: str = ""


def provenance_predicate(facts: BuildFacts, invocation: Invocation, how: str = "release") -> dict:
    source_uri = f"git+{facts.source}" if facts.source else "git+file:unknown"
    dependencies: list[dict] = [{"uri": source_uri, "digest": {"gitCommit": facts.revision}}] if facts.revision else []
    base = {
        "uri": f"docker-image://{facts.base_image}",
        "digest": {"sha256": facts.base_image_id.split(":")[-1]},
        "annotations": {"digest_kind": "image id (config digest)"},
    }
    for pinned in filter(None, map(parse_digest_ref, facts.base_repo_digests)):  # pulled: its manifest digest too
        name, digest = pinned
        base = {
            "uri": f"docker-image://{name}",
            "digest": {"sha256": digest_hex(digest)},
            "annotations": {"image_id": facts.base_image_id, "as_given": facts.base_image},
        }
        break
    dependencies.append(base)
    stub = dict(facts.stub)
    if stub.get("sha256"):
        dependencies.append(
            {
                "uri": f"triton-python-backend-stub:{stub.get('provider')}",
                "name": "python backend stub",
                "digest": {"sha256": stub["sha256"]},
                "annotations": {"origin": stub.get("origin", "")},
            }
        )
    dependencies += [
        {"uri": f"pkg:pypi/{name}@{version}", "digest": {"sha256": digest}}
        for name, version, digest in facts.wheels
        if digest
    ]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    metadata: dict = {"finishedOn": now, **({"startedOn": facts.created} if facts.created else {})}
    if invocation.run_url:
        metadata["invocationId"] = invocation.run_url
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "source": {"uri": source_uri, "revision": facts.revision},
                "version": facts.version,
                "bumped_from": facts.bumped_from or None,
                "settings": dict(facts.settings),
            },
            "internalParameters": {
                "stub": stub,
                "how": how,
                **({"github": dict(invocation.github)} if invocation.github else {}),
            },
            "resolvedDependencies": dependencies,
        },
        "runDetails": {
            "builder": {"id": invocation.builder_id, "version": {"triton-release": __version__}},
            "metadata": metadata,
        },
    }
