"""Checking a release's evidence: every envelope verifies with the key, every Statement is about
the digest, the golden results say every tested case passed, the in-toto Test Results say
`pass`, and the SBOM and the provenance are there. What is wrong is named, all of it, in one
refusal (exit 1)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from triton_release import contract
from triton_release.contract import (
    GOLDEN_TYPE,
    KINDS,
    PROVENANCE_TYPE,
    SBOM_TYPE,
    TEST_RESULT_TYPE,
    lower_cased,
    parse_digest_ref,
    parse_tag_ref,
)
from triton_release.errors import Refused, UsageError
from triton_release.evidence.signing import PublicKey, signature_problem, statement_of
from triton_release.registry import attestations
from triton_release.registry.client import RegistryRepository


def parse_reference(ref: str) -> tuple[str, str | None, str | None]:
    """REPO:TAG or REPO@sha256:... -> (REPO, tag, digest)."""
    if "@" in (ref or ""):
        pinned = parse_digest_ref(ref)
        if pinned is None:
            raise UsageError(f"{ref!r}: after @ give the manifest digest, sha256: and 64 hex digits.")
        return lower_cased(pinned[0]), None, pinned[1]
    tagged = parse_tag_ref(ref or "")
    if tagged is None:
        raise UsageError(f"{ref!r}: give the image as REPO:TAG or REPO@sha256:..., e.g. ghcr.io/org/models:1.4.0.")
    return lower_cased(tagged[0]), tagged[1], None


@dataclass(frozen=True)
class Found:
    """One envelope of the evidence, as checked."""

    predicate_type: str
    layer: str  # its digest
    signed: bool
    problems: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "predicate_type": self.predicate_type,
            "kind": KINDS.get(self.predicate_type, "other"),
            "layer": self.layer,
            "signed": self.signed,
            "verified": not self.problems,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class EvidenceCheck:
    repository: str
    reference: str  # as given
    digest: str
    tag: str  # the evidence tag
    manifest: str | None  # its manifest digest; None: no evidence
    key: str  # the key's fingerprint
    found: tuple[Found, ...]
    problems: tuple[str, ...]
    golden: dict | None = None  # the golden predicate's counts
    tests: dict | None = None  # the Test Results' result and counts

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "reference": self.reference,
            "digest": self.digest,
            "evidence": f"{self.repository}:{self.tag}",
            "evidence_manifest": self.manifest,
            "key": self.key,
            "verified": self.ok,
            "statements": [f.to_json() for f in self.found],
            "problems": list(self.problems),
            **({"golden": self.golden} if self.golden else {}),
            **({"test_results": self.tests} if self.tests else {}),
        }

    def facts(self) -> dict:
        return {"digest": self.digest, "evidence_verified": self.ok}


def _golden_problems(predicate: object) -> tuple[list[str], dict]:
    if not isinstance(predicate, dict):
        return ["its golden results are not an object"], {}
    failed = [
        f"{m.get('model')}/{c.get('name')}"
        for m in predicate.get("models") or []
        if isinstance(m, dict)
        for c in m.get("cases") or []
        if isinstance(c, dict) and c.get("passed") is not True
    ]
    counts = {
        "passed": predicate.get("passed"),
        "cases": predicate.get("cases"),
        "failed": len(failed),
        "not_tested": [n.get("model") for n in predicate.get("not_tested") or [] if isinstance(n, dict)],
    }
    if predicate.get("passed") is not True or failed:
        return [
            f"the golden results say not every tested case passed ({', '.join(failed[:5]) or 'passed: false'})"
        ], counts
    return [], counts


def _tests_problems(predicate: object) -> tuple[list[str], dict]:
    """What in-toto's Test Results predicate says that fails verify: a result other than `pass`, or
    a failed test listed under a `pass`."""
    if not isinstance(predicate, dict):
        return ["its Test Results are not an object"], {}
    lists = {key: predicate.get(key) or [] for key in ("passedTests", "warnedTests", "failedTests")}
    if not all(isinstance(v, list) for v in lists.values()):
        return ["its Test Results' test lists are not lists"], {}
    failed = [str(name) for name in lists["failedTests"]]
    counts = {
        "result": predicate.get("result"),
        "passed": len(lists["passedTests"]),
        "warned": [str(name) for name in lists["warnedTests"]],
        "failed": failed,
    }
    if predicate.get("result") != "pass" or failed:
        return [
            f"the Test Results say {predicate.get('result')!r}, not 'pass'"
            + (f" (failed: {', '.join(failed[:5])})" if failed else "")
        ], counts
    return [], counts


def check(registry: RegistryRepository, reference: str, digest: str, key: PublicKey) -> EvidenceCheck:
    """The evidence of `digest` checked with `key`; refused, naming every problem, unless it holds."""
    tag = contract.evidence_tag(digest)
    stored = attestations.read(registry, digest)
    if stored is None:
        result = EvidenceCheck(
            str(registry),
            reference,
            digest,
            tag,
            None,
            key.fingerprint,
            (),
            (f"no evidence is attached ({registry}:{tag} does not exist)",),
        )
        raise _refusal(result)
    manifest, envelopes = stored
    found, problems, types, golden, tests = [], [], set(), None, None
    named: dict[str, list[str]] = {}
    for envelope in envelopes:
        own: list[str] = []
        annotated = str(envelope.annotations.get(attestations.PREDICATE_TYPE, ""))
        try:
            data = json.loads(envelope.body)
        except ValueError:
            data = None
        statement, why = statement_of(data)
        if statement is None:
            found.append(Found(annotated, str(envelope.descriptor.get("digest")), False, (why,)))
            problems.append(f"layer {envelope.descriptor.get('digest')}: {why}")
            continue
        kind = str(statement.get("predicateType", ""))
        name = KINDS.get(kind, kind)
        if annotated and annotated != kind:
            own.append(f"its layer is annotated {annotated}, its Statement says {kind}")
        subjects = [s.get("digest", {}).get("sha256") for s in statement.get("subject") or [] if isinstance(s, dict)]
        wrong = sorted({f"sha256:{s}" for s in subjects if f"sha256:{s}" != digest})
        if not subjects:
            own.append("it names no subject")
        elif wrong:
            own.append(
                f"its subject is {', '.join(wrong)}, not {digest}: the subject does not match (evidence of "
                f"another image)"
            )
        signed = bool(data.get("signatures"))
        signature = signature_problem(data, key)
        if signature:
            own.append(signature)
        if kind == GOLDEN_TYPE:
            more, golden = _golden_problems(statement.get("predicate"))
            own += more
        if kind == TEST_RESULT_TYPE:
            more, tests = _tests_problems(statement.get("predicate"))
            own += more
        types.add(kind)
        found.append(Found(kind, str(envelope.descriptor.get("digest")), signed, tuple(own)))
        for problem in own:  # one problem of several statements is said once, naming them all
            named.setdefault(problem, []).append(name)
    problems += [f"{', '.join(names)}: {problem}" for problem, names in named.items()]
    for kind in (GOLDEN_TYPE, TEST_RESULT_TYPE, PROVENANCE_TYPE, SBOM_TYPE):
        if kind not in types:
            problems.append(f"no {KINDS[kind]} ({kind}) is attached")
    result = EvidenceCheck(
        str(registry),
        reference,
        digest,
        tag,
        manifest,
        key.fingerprint,
        tuple(found),
        tuple(problems),
        golden,
        tests,
    )
    if problems:
        raise _refusal(result)
    return result


def _refusal(result: EvidenceCheck) -> Refused:
    unsigned = any("unsigned" in p for p in result.problems)
    fix = (
        "release it with a signing key (--signing-key, the action's signing-key) to attach signed evidence"
        if unsigned
        else "check that the key is the one releases are signed with, and that the image is one "
        "triton-release released; a rerun of its release attaches evidence that is missing"
    )
    return Refused(
        f"""
        The evidence of {result.reference} ({result.digest}) does not verify with {result.key}:
        {"; ".join(result.problems)}. To fix it, {fix}.""",
        result=result,
    )
