"""The release's evidence made and attached: its four Statements about the pushed digest (the
golden results, the same cases as in-toto Test Results, provenance, SBOM), each in a DSSE
envelope (signing.py), stored in cosign's layout (registry/attestations.py).

- `release`: after the push, from what the run found: its golden run, its environments (each
  wheel by its sha256), its base image and stub.
- `rerun`: a later run that finds the newest release without evidence (the run that pushed it
  stopped before attaching) re-runs the release's own golden cases against its digest, reads the
  environments and packages from the image itself and the rest from its labels, and attaches that.
- `stage` attaches the provenance and the SBOM to a candidate; `promote` adds the golden results
  and the Test Results its shards' records hold, so that the release (the same digest) carries
  all four.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_release import contract
from triton_release.contract import (
    BASE_LABEL,
    CREATED_LABEL,
    MODELS_LABEL,
    PYTHON_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    STUB_LABEL,
)
from triton_release.evidence import statements as st
from triton_release.evidence.sbom import Package, contents, contents_arguments, sbom, with_subject
from triton_release.evidence.signing import Signing, statement_of
from triton_release.history.git import Git
from triton_release.registry import attestations
from triton_release.registry.attestations import Layer
from triton_release.registry.write_once import TagNotOverwritable

if TYPE_CHECKING:
    import docker

    from triton_release.evidence.packages import ImagePackages
    from triton_release.history.planned import ChangesResult
    from triton_release.image.prepared import Prepared
    from triton_release.models.suite import GoldenRun
    from triton_release.registry.client import RegistryRepository


@dataclass(frozen=True)
class Evidence:
    """The evidence attached to a release (or a candidate)."""

    repository: str
    version: str
    digest: str
    tag: str
    manifest: str
    layers: tuple[Layer, ...]
    signing: str  # key | keyless | none
    signed_by: str  # the key's fingerprint, keyless, or unsigned
    referrers: bool  # also a referrer of the digest (OCI 1.1)
    bytes: int  # uploaded at most: envelopes, config and manifest
    how: str  # release | rerun | stage | promote
    passed: bool | None = None  # what the golden results say; None: not attached here

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "version": self.version,
            "digest": self.digest,
            "evidence": f"{self.repository}:{self.tag}",
            "evidence_manifest": self.manifest,
            "statements": [layer.to_json() for layer in self.layers],
            "signing": self.signing,
            "signed_by": self.signed_by,
            "signed": self.signing != "none",
            "referrers": self.referrers,
            "bytes": self.bytes,
            "how": self.how,
            "golden_passed": self.passed,
        }

    def facts(self) -> dict:
        return {"evidence": f"{self.repository}:{self.tag}", "evidence_signed": self.signing != "none"}


def _image(registry: RegistryRepository, digest: str) -> tuple[dict, str]:
    """The labels and the config digest of the manifest `digest`."""
    manifest = registry.manifest(digest)
    config = registry.image_config(digest)
    return (config.get("config") or {}).get("Labels") or {}, manifest.config_digest if manifest else ""


def _models(labels: Mapping[str, str]) -> dict[str, list[int]]:
    try:
        found = json.loads(labels.get(MODELS_LABEL) or "{}")
    except ValueError:
        return {}
    return (
        {str(m): [v for v in vs if isinstance(v, int)] for m, vs in found.items() if isinstance(vs, list)}
        if isinstance(found, dict)
        else {}
    )


@dataclass(frozen=True)
class CaseFile:
    """A golden case's file as released: its path in the git repository, its git blob id at the
    released commit, and its bytes."""

    path: str
    blob: str
    content: bytes


class SbomBeside:
    """The release's SBOM written while its image is built and tested, by a process of its own
    (`python -P -m triton_release.evidence.sbom`, run from a folder of its own: nothing of the
    checkout it is started in is imported): all of it but its subject (the pushed digest) is known
    once the environments are resolved, and at a thousand models the CycloneDX library takes
    about 0.4 s to write it. The evidence takes it only when what it was written from is what the
    evidence would write it from (the models the pushed image's labels list, the packages read
    again); else, or when the process failed or took over WAIT seconds, it is written again there."""

    WAIT = 60.0

    def __init__(self, prepared: Prepared, models: Mapping[str, list[int]]) -> None:
        self.given = b""
        self._document: dict | None = None
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen | None = None
        try:
            _, found, envs = _packages(prepared)
            self.given = contents_arguments(**_contents_arguments(prepared, models, found, envs))
            self._child = subprocess.Popen(
                [sys.executable, "-P", "-m", "triton_release.evidence.sbom"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=tempfile.gettempdir(),
            )
        except Exception:  # written again by the evidence, where its error is raised and shown
            return
        self._thread = threading.Thread(target=self._read, args=(self._child,), name="triton-release-sbom", daemon=True)
        self._thread.start()

    def _read(self, child: subprocess.Popen) -> None:
        try:
            written, _ = child.communicate(self.given)
            self._document = json.loads(written) if child.returncode == 0 else None
        except Exception:
            self._document = None

    def contents(self, given: bytes) -> dict | None:
        """The contents written from `given` (`contents_arguments`' bytes), or None: written from
        others, or the process failed or is late (then stopped)."""
        if self._thread is None or given != self.given:
            self.close()
            return None
        self._thread.join(self.WAIT)
        if self._thread.is_alive():
            self.close()
            return None
        return self._document

    def close(self) -> None:
        """Stop the process if it still runs (a release that ends without its evidence)."""
        if self._child is not None and self._child.poll() is None:
            self._child.kill()
            self._child.wait()


def _contents_arguments(
    prepared: Prepared,
    models: Mapping[str, list[int]],
    found: ImagePackages,
    envs: Mapping[str, tuple[Package, ...]],
) -> dict[str, Any]:
    base = prepared.base
    return {
        "base_image": base.image,
        "base_image_id": base.image_id,
        "triton": base.triton_version,
        "models": dict(models),
        "environments": dict(envs),
        "system": list(found.system),
        "python": prepared.stub.target_python,
    }


def case_files(root: Path, commit: str, cases: Iterable[Any]) -> dict[str, CaseFile]:
    """Each case (<model>/<name>) -> its golden file at `commit` (the one released), from git; a
    case whose file is not there (or no git around `root`) is left out."""
    cases = list(cases)
    if not cases or not commit:
        return {}
    try:
        git = Git(Git(root).toplevel())
        prefix = Path(root).resolve().relative_to(git.cwd.resolve()).as_posix()
    except Exception:  # no git around it: no digests, said so in the predicate
        return {}
    paths = {
        c.case: "/".join(p for p in (prefix if prefix != "." else "", *Path(c.path).parts[-3:]) if p) for c in cases
    }
    try:
        ids = git.blob_ids(commit, sorted(set(paths.values())))
        blobs = git.blobs(commit, sorted(ids))
    except Exception:
        return {}
    return {
        case: CaseFile(path, ids[path], content)
        for case, path in paths.items()
        if path in ids and (content := blobs.get(path)) is not None
    }


def _contents(files: Mapping[str, CaseFile]) -> dict[str, bytes | None]:
    return {case: file.content for case, file in files.items()}


def _configuration(files: Mapping[str, CaseFile]) -> list[tuple[str, str]]:
    return [(file.path, file.blob) for file in files.values()]


def _tests_payload(name: str, digest: str, predicate: dict) -> tuple[str, bytes]:
    return contract.TEST_RESULT_TYPE, st.tests_statement(name, digest, predicate)


def _sign(signing: Signing, payloads: list[tuple[str, bytes]]) -> list[tuple[bytes, dict, str]]:
    out = []
    for kind, payload in payloads:
        signed = signing.sign(payload)
        annotations = {
            attestations.PREDICATE_TYPE: kind,
            attestations.SIGNATURE: "",
            attestations.SIGNING: signing.mode,
            **signed.annotations,
        }
        out.append((signed.body, annotations, kind))
    return out


def store(
    registry: RegistryRepository,
    digest: str,
    version: str,
    layers: list[tuple[bytes, dict, str]],
    signing: Signing,
    how: str,
    passed: bool | None,
) -> Evidence:
    try:
        tag, manifest, sent, referred = attestations.write(registry, digest, [(body, ann) for body, ann, _ in layers])
    except TagNotOverwritable as exc:  # evidence is written once a digest; only promote adds to its stage's
        adding = " (promote adds the golden results to the evidence its stage attached: exempt sha256-*.att, or release with `release`)"
        raise exc.having(
            f"{registry}:{version} ({digest}) is published, and its evidence tag already held evidence"
            f"{adding if how == 'promote' else ''}; it is left as it was."
        ) from None
    described = tuple(
        Layer(kind, "sha256:" + hashlib.sha256(body).hexdigest(), len(body), ann[attestations.SIGNING])
        for body, ann, kind in layers
    )
    return Evidence(
        str(registry),
        version,
        digest,
        tag,
        manifest,
        described,
        signing.mode,
        signing.identity,
        referred,
        sent,
        how,
        passed,
    )


def _base_digests(client: docker.DockerClient, image_id: str) -> tuple[str, ...]:
    try:
        return tuple(client.images.get(image_id).attrs.get("RepoDigests") or ())
    except Exception:  # the daemon does not say: the image id alone
        return ()


def _file_sha256(path: Path | None) -> str:
    if path is None or not Path(path).is_file():
        return ""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def release(
    registry: RegistryRepository,
    digest: str,
    version: str,
    *,
    root: Path,
    planned: ChangesResult,
    prepared: Prepared,
    run: GoldenRun | None,
    tested: Iterable[str],
    signing: Signing,
    invocation: st.Invocation,
    settings: Mapping[str, Any],
    latency: Any = None,
    sbom_beside: SbomBeside | None = None,
) -> Evidence:
    """The evidence of release `version` (`digest`), from the run that built, tested and pushed it
    (`sbom_beside`: its SBOM's contents, written while the image was built and tested)."""
    labels, config_digest = _image(registry, digest)
    files = case_files(root, planned.found.head, run.cases if run else ())
    golden = st.golden_predicate(
        image=f"{registry}:{version}",
        digest=digest,
        config_digest=config_digest,
        triton=prepared.base.triton_version,
        models=_models(labels),
        run=run,
        case_files=_contents(files),
        tested=tested,
        previous=planned.plan.previous if planned.plan else None,
        latency=latency,
    )
    tests = st.tests_of_run(
        run, configuration=_configuration(files), url=invocation.run_url, all_passed=golden["passed"]
    )
    payloads = [
        _payload(str(registry), digest, contract.GOLDEN_TYPE, golden),
        _tests_payload(str(registry), digest, tests),
        *_from_build(
            registry, digest, version, labels, planned, prepared, settings, invocation, "release", sbom_beside
        ),
    ]
    return store(registry, digest, version, _sign(signing, payloads), signing, "release", golden["passed"])


def _payload(name: str, digest: str, kind: str, predicate: dict) -> tuple[str, bytes]:
    """A Statement of `kind` about `name`@`digest`, as `_sign` takes it."""
    return kind, st.statement(name, digest, kind, predicate)


def _from_build(
    registry: RegistryRepository,
    digest: str,
    version: str,
    labels: Mapping[str, str],
    planned: ChangesResult,
    prepared: Prepared,
    settings: Mapping[str, Any],
    invocation: st.Invocation,
    how: str,
    beside: SbomBeside | None = None,
) -> list[tuple[str, bytes]]:
    """Provenance and SBOM from what the run that built the image found: its base image and stub,
    and its environments (each wheel by its sha256); the SBOM's contents from `beside` when it
    wrote them from what they would be written from here."""
    base, choice = prepared.base, prepared.stub
    client, found, envs = _packages(prepared)
    name = str(registry)
    facts = st.BuildFacts(
        planned.found.head,
        labels.get(SOURCE_LABEL, ""),
        base.image,
        base.image_id,
        _base_digests(client, base.image_id),
        {**choice.to_json(), "sha256": _file_sha256(choice.stub_file)},
        settings,
        tuple(sorted({(d.name, d.version, d.sha256) for d in prepared.environments.distributions})),
        labels.get(CREATED_LABEL, ""),
        version,
        planned.found.base or "",
    )
    arguments = _contents_arguments(prepared, _models(labels), found, envs)
    written = beside.contents(contents_arguments(**arguments)) if beside is not None else None
    if written is None:
        written = contents(**arguments)
    bom = with_subject(written, image=name, digest=digest, version=version)
    return [
        _payload(name, digest, contract.PROVENANCE_TYPE, st.provenance_predicate(facts, invocation, how)),
        _payload(name, digest, contract.SBOM_TYPE, bom),
    ]


def _from_image(
    registry: RegistryRepository,
    digest: str,
    version: str,
    image: str,
    labels: Mapping[str, str],
    settings: Mapping[str, Any],
    invocation: st.Invocation,
    how: str,
) -> tuple[list, dict, str]:
    """Provenance and SBOM read from a pushed image itself (pulled as `image`) and its labels; and
    the Triton version its environment names."""
    from triton_release.evidence.packages import image_packages
    from triton_release.image.engine import docker_client

    client = docker_client()
    python = labels.get(PYTHON_LABEL, "")
    found = image_packages(client, image, f"python{python}" if python else "python3")
    base_image = str(settings.get("base_image") or "")
    try:
        base_id = client.images.get(base_image).id if base_image else ""
    except Exception:
        base_id = ""
    try:
        variables = client.images.get(image).attrs.get("Config", {}).get("Env") or []
    except Exception:
        variables = []
    triton = next((v.split("=", 1)[1] for v in variables if v.startswith("TRITON_SERVER_VERSION=")), "")
    provider, _, origin = labels.get(STUB_LABEL, "").partition(": ")
    name, models = str(registry), _models(labels)
    facts = st.BuildFacts(
        labels.get(REVISION_LABEL, ""),
        labels.get(SOURCE_LABEL, ""),
        base_image,
        base_id,
        _base_digests(client, base_id) if base_id else (),
        {"provider": provider, "origin": origin, "target_python": python, "read_from": "the image's labels"},
        settings,
        created=labels.get(CREATED_LABEL, ""),
        version=version,
        bumped_from=labels.get(BASE_LABEL, ""),
    )
    bom = sbom(
        image=name,
        digest=digest,
        version=version,
        base_image=base_image,
        base_image_id=base_id,
        triton=triton,
        models=models,
        environments=found.environments,
        system=found.system,
        python=python,
    )
    return (
        [
            _payload(name, digest, contract.PROVENANCE_TYPE, st.provenance_predicate(facts, invocation, how)),
            _payload(name, digest, contract.SBOM_TYPE, bom),
        ],
        models,
        triton,
    )


def rerun(
    registry: RegistryRepository,
    digest: str,
    version: str,
    *,
    root: Path,
    run: GoldenRun | None,
    signing: Signing,
    invocation: st.Invocation,
    settings: Mapping[str, Any],
) -> Evidence:
    """The evidence of release `version`, made by a later run: `run` re-ran its golden cases against
    `REPO:version` (that digest, pulled)."""
    labels, config_digest = _image(registry, digest)
    payloads, models, triton = _from_image(
        registry, digest, version, f"{registry}:{version}", labels, settings, invocation, "rerun"
    )
    files = case_files(root, labels.get(REVISION_LABEL, ""), run.cases if run else ())
    golden = st.golden_predicate(
        image=f"{registry}:{version}",
        digest=digest,
        config_digest=config_digest,
        triton=triton,
        models=models,
        run=run,
        case_files=_contents(files),
        tested=list(models),
        latency=None,
        how="rerun: the release's own golden cases, run again against its digest by a "
        "later run (the run that pushed it stopped before attaching its evidence)",
    )
    tests = st.tests_of_run(
        run, configuration=_configuration(files), url=invocation.run_url, all_passed=golden["passed"]
    )
    payloads[:0] = [
        _payload(str(registry), digest, contract.GOLDEN_TYPE, golden),
        _tests_payload(str(registry), digest, tests),
    ]
    return store(registry, digest, version, _sign(signing, payloads), signing, "rerun", golden["passed"])


def stage(
    registry: RegistryRepository,
    digest: str,
    version: str,
    *,
    planned: ChangesResult,
    prepared: Prepared,
    signing: Signing,
    invocation: st.Invocation,
    settings: Mapping[str, Any],
) -> Evidence:
    """Provenance and SBOM of a staged candidate; promote adds the golden results."""
    labels, _ = _image(registry, digest)
    payloads = _from_build(registry, digest, version, labels, planned, prepared, settings, invocation, "stage")
    return store(registry, digest, version, _sign(signing, payloads), signing, "stage", None)


def promote(
    registry: RegistryRepository,
    digest: str,
    version: str,
    *,
    records: Iterable[Any],
    untested: Iterable[tuple[str, str]],
    signing: Signing,
    invocation: st.Invocation,
    root: Path | None = None,
) -> Evidence:
    """The golden results and Test Results of a promoted candidate (its shards' records), added to
    what its stage attached (kept as they were, signed by the stage). `root`: a checkout of the
    candidate's commit, where the case files' blob ids are read (none: the Test Results name no
    configuration, the records do not hold it)."""
    labels, _ = _image(registry, digest)
    records, untested = list(records), list(untested)
    golden = st.golden_from_records(
        image=f"{registry}:{version}", digest=digest, records=records, models=_models(labels), untested=untested
    )
    ran = [
        _RecordedCase(name, f"{name.split('/', 1)[0]}/golden/{name.split('/', 1)[-1]}.json")
        for record in records
        for name in (str(case.get("case", "")) for case in record.cases)
        if "/" in name
    ]
    files = case_files(root, labels.get(REVISION_LABEL, ""), ran) if root is not None else {}
    tests = st.tests_of_records(
        records,
        untested=untested,
        configuration=_configuration(files),
        url=invocation.run_url,
        all_passed=golden["passed"],
    )
    layers = _sign(
        signing,
        [
            _payload(str(registry), digest, contract.GOLDEN_TYPE, golden),
            _tests_payload(str(registry), digest, tests),
        ],
    )
    stored = attestations.read(registry, digest)
    for envelope in stored[1] if stored is not None else []:  # the stage's provenance and SBOM
        statement, _ = statement_of(_json(envelope.body))
        kind = str((statement or {}).get("predicateType", ""))
        if kind and kind not in (contract.GOLDEN_TYPE, contract.TEST_RESULT_TYPE):
            layers.append((envelope.body, dict(envelope.annotations), kind))
    return store(registry, digest, version, layers, signing, "promote", golden["passed"])


@dataclass(frozen=True)
class _RecordedCase:
    """A case a shard's record names, where its file lies in the model repository."""

    case: str
    path: str


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _packages(prepared: Prepared) -> tuple[docker.DockerClient, ImagePackages, dict[str, tuple[Package, ...]]]:
    """The daemon, the Python packages of the base image's target Python, and each model
    environment's distributions, for the SBOM."""
    from triton_release.evidence.packages import image_packages
    from triton_release.image.engine import docker_client

    base, choice = prepared.base, prepared.stub
    client = docker_client()
    install = base.pythons.get(choice.target_python)
    found = image_packages(client, base.image_id, install.executable if install else "python3")
    envs = {
        model: tuple(Package(d.name, d.version, d.sha256, location=f"/{d.in_image}") for d in env.distributions)
        for model, env in prepared.environments.by_model.items()
    }
    return client, found, envs
