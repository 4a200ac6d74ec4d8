"""Release evidence on plain data: the Statements, the DSSE envelopes (checked here with
`cryptography` alone, over DSSE's pre-authentication encoding), the key files refused with the
fix, cosign's layout, the SBOM, the check `verify` makes, and the keyless parts that need no
network."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from support.models import golden_case, python_model_files
from triton_release import contract
from triton_release.errors import Refused, UsageError
from triton_release.evidence import attach as evidence_attach
from triton_release.evidence import keyless, signing
from triton_release.evidence import statements as st
from triton_release.evidence.packages import ImagePackages
from triton_release.evidence.sbom import Package, contents_arguments, listed_packages, sbom, with_subject
from triton_release.evidence.verify import check, parse_reference
from triton_release.models.answers import OutputResult
from triton_release.models.inference import CaseResult
from triton_release.models.suite import GoldenRun
from triton_release.registry import attestations
from triton_release.registry.client import Manifest, content_digest

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding, written out from the spec."""
    kind = payload_type.encode()
    return b"DSSEv1 " + str(len(kind)).encode() + b" " + kind + b" " + str(len(payload)).encode() + b" " + payload


def write_key(
    folder: Path, name: str = "key", curve: ec.EllipticCurve | None = None
) -> tuple[Path, Path, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(curve or ec.SECP256R1())
    private = folder / f"{name}.pem"
    public = folder / f"{name}.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public, key


def case(name: str, passed: bool = True) -> CaseResult:
    return CaseResult(
        name,
        f"/x/model_repository/{name.split('/')[0]}/golden/{name.split('/')[1]}.json",
        passed,
        1.5,
        (OutputResult("OUTPUT0", passed, 0.0, 0.0),),
        "" if passed else "differs",
    )


CASE_FILE = json.dumps(
    {
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [1]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1], "data": [2]}],
        "atol": 0.5,
    }
).encode()


def run(*cases: CaseResult, **extra) -> GoldenRun:
    return GoldenRun("sha256:" + "ee" * 32, ("a", "b", "ens"), tuple(cases), (), **extra)


# -- the golden predicate ---------------------------------------------------------------------


def test_the_golden_predicate_names_every_case_by_digest_and_every_model_not_tested_with_why():
    predicate = st.golden_predicate(
        image="r/m:1.1.0",
        digest=DIGEST,
        config_digest="sha256:" + "ee" * 32,
        triton="2.51.0",
        models={"a": [1, 2], "b": [1], "gpu": [1], "ens": [1], "old": [3], "bare": [1]},
        run=GoldenRun(
            "sha256:" + "ee" * 32,
            ("a", "b", "ens", "bare"),
            (case("a/basic"), case("b/basic")),
            ("bare",),
            on_cpu=("b",),
            needs_gpu=(("gpu", "no CUDA"),),
        ),
        case_files={"a/basic": CASE_FILE, "b/basic": None},
        tested=["a", "b", "gpu", "bare"],
        previous="1.0.0",
    )
    assert predicate["passed"] is True and predicate["cases"] == 2 and predicate["failed"] == 0
    assert predicate["triton"] == {"version": "2.51.0"} and predicate["tool"]["name"] == "triton-release"
    assert predicate["image"]["digest"] == DIGEST
    [a] = [m for m in predicate["models"] if m["model"] == "a"]
    assert a["version"] == 2  # the newest in the image: the case names no version
    entry = a["cases"][0]
    assert entry["file_sha256"] == hashlib.sha256(CASE_FILE).hexdigest()
    raw = json.loads(CASE_FILE)
    assert entry["inputs_sha256"] == hashlib.sha256(st.canonical(raw["inputs"])).hexdigest()
    assert entry["outputs_sha256"] == hashlib.sha256(st.canonical({"outputs": raw["outputs"]})).hexdigest()
    assert entry["tolerances"] == {"OUTPUT0": {"datatype": "FP32", "atol": 0.5, "rtol": 1e-05}}
    [b] = [m for m in predicate["models"] if m["model"] == "b"]
    assert "not recorded" in b["cases"][0]["digests"]
    assert predicate["tested_on_cpu"] == ["b"]
    why = {n["model"]: n["why"] for n in predicate["not_tested"]}
    assert set(why) == {"gpu", "ens", "old", "bare"}
    assert "needs a GPU" in why["gpu"] and "no CUDA" in why["gpu"]
    assert "no golden cases" in why["bare"] and "loaded as a model another one needs" in why["ens"]
    assert why["old"] == "unchanged since 1.0.0, whose release tested it"


def test_a_failed_case_makes_the_golden_predicate_fail():
    predicate = st.golden_predicate(
        image="r/m:1.0.0",
        digest=DIGEST,
        config_digest="",
        triton="",
        models={"a": [1]},
        run=run(case("a/basic", passed=False)),
        case_files={},
    )
    assert predicate["passed"] is False and predicate["failed"] == 1
    assert predicate["models"][0]["cases"][0]["message"] == "differs"


# -- in-toto's Test Results ------------------------------------------------------------------


def test_the_test_results_name_each_case_warn_the_gpu_model_and_give_each_case_file_s_git_blob(git_repo):
    git_repo.write({**python_model_files("a"), "a/golden/edge.json": golden_case(), **python_model_files("b")})
    head = git_repo.commit("three cases")
    cases = [
        replace(case("a/basic"), path=str(git_repo.models / "a" / "golden" / "basic.json")),
        replace(case("a/edge"), path=str(git_repo.models / "a" / "golden" / "edge.json")),
        replace(case("b/basic"), path=str(git_repo.models / "b" / "golden" / "basic.json")),
    ]
    files = evidence_attach.case_files(git_repo.models, head, cases)
    configuration = [(f.path, f.blob) for f in files.values()]
    predicate = st.tests_of_run(
        run(*cases, needs_gpu=(("gpu", "no CUDA device"),)),
        configuration=configuration,
        url="https://github.com/org/models/actions/runs/42",
        all_passed=True,
    )
    assert predicate["result"] == "pass"
    assert predicate["passedTests"] == ["a/basic", "a/edge", "b/basic"]
    assert predicate["warnedTests"] == ["gpu"] and predicate["failedTests"] == []
    assert predicate["url"] == "https://github.com/org/models/actions/runs/42"
    named = {d["name"]: d["digest"] for d in predicate["configuration"]}
    assert list(named) == sorted(named) and len(named) == 3
    for path, digest in named.items():
        assert path.startswith("model_repository/")  # the path in the git repository, not the model folder
        assert digest == {"gitBlob": git_repo.git("rev-parse", f"HEAD:{path}")}

    statement = json.loads(st.tests_statement("r/m", DIGEST, predicate))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == contract.TEST_RESULT_TYPE == "https://in-toto.io/attestation/test-result/v0.1"
    assert statement["subject"] == [{"name": "r/m", "digest": {"sha256": "ab" * 32}}]
    assert statement["predicate"] == predicate


def test_a_failed_case_fails_the_test_results_and_no_run_leaves_the_url_out():
    predicate = st.tests_of_run(
        run(case("a/basic"), case("b/basic", passed=False)), configuration=[], url="", all_passed=False
    )
    assert predicate["result"] == "fail" and predicate["failedTests"] == ["b/basic"]
    assert predicate["passedTests"] == ["a/basic"] and "url" not in predicate
    # a run the golden results say did not pass fails them too, even with no failed case
    assert st.tests_of_run(run(case("a/basic")), configuration=[], url="", all_passed=False)["result"] == "fail"
    nothing = st.tests_of_run(None, configuration=[], url="", all_passed=True)
    assert nothing == {"result": "pass", "configuration": [], "passedTests": [], "warnedTests": [], "failedTests": []}


def test_the_test_results_of_shards_records_warn_the_models_set_aside_for_a_gpu():
    records = [
        SimpleNamespace(cases=({"case": "a/basic", "passed": True},), needs_gpu=(("gpu", "no CUDA"),)),
        SimpleNamespace(cases=({"case": "b/basic", "passed": False},), needs_gpu=()),
    ]
    predicate = st.tests_of_records(records, untested=[("big", "needs a GPU")], all_passed=False)
    assert predicate["result"] == "fail"
    assert predicate["passedTests"] == ["a/basic"] and predicate["failedTests"] == ["b/basic"]
    assert predicate["warnedTests"] == ["big", "gpu"]


def test_the_statement_is_about_the_digest():
    statement = json.loads(st.statement("r/m", DIGEST, contract.GOLDEN_TYPE, {"passed": True}))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [{"name": "r/m", "digest": {"sha256": "ab" * 32}}]
    assert statement["predicateType"] == "https://triton-release.dev/golden/v1"


def test_the_invocation_takes_the_github_run_and_nothing_else_from_the_environment():
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/models",
        "GITHUB_RUN_ID": "42",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_SHA": "f" * 40,
        "GITHUB_TOKEN": "ghs_secret",
        "INPUT_PASSWORD": "hunter2",
        "GITHUB_ACTION_REPOSITORY": "org/triton-release",
        "GITHUB_ACTION_REF": "v1",
    }
    invocation = st.Invocation.from_env(env, action=True)
    assert invocation.builder_id == "https://github.com/org/triton-release@v1"
    assert invocation.run_url == "https://github.com/org/models/actions/runs/42/attempts/2"
    text = json.dumps(invocation.github)
    assert "ghs_secret" not in text and "hunter2" not in text
    assert st.Invocation.from_env({}).builder_id == st.CLI_BUILDER and st.Invocation.from_env({}).github == {}
    # the action run where the runner does not name the action's repository (a docker:// step, act)
    assert st.Invocation.from_env({"GITHUB_ACTIONS": "true"}, action=True).builder_id == st.ACTION_BUILDER


# -- keys and envelopes -----------------------------------------------------------------------


def test_a_signed_envelope_verifies_with_cryptography_alone_over_the_pae(tmp_path):
    private, public, key = write_key(tmp_path)
    signer = signing.load_signing_key(private)
    payload = st.statement("r/m", DIGEST, contract.GOLDEN_TYPE, {"passed": True})
    envelope = signer.sign(payload).envelope
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(envelope["payload"]) == payload
    [sig] = envelope["signatures"]
    assert sig["keyid"] == ""  # as cosign writes it: cosign skips a keyid naming another key
    key.public_key().verify(
        base64.b64decode(sig["sig"]), pae(envelope["payloadType"], payload), ec.ECDSA(hashes.SHA256())
    )
    assert signing.signature_problem(envelope, signing.load_public_key(public)) == ""
    assert signer.fingerprint == signing.load_public_key(public).fingerprint
    assert "PRIVATE" not in repr(signer)


def test_another_key_or_no_signature_is_named(tmp_path):
    private, _, _ = write_key(tmp_path)
    _, other, _ = write_key(tmp_path, "other")
    envelope = signing.load_signing_key(private).sign(b"{}").envelope
    assert "does not verify with the key" in signing.signature_problem(envelope, signing.load_public_key(other))
    unsigned = signing.Signing("none").sign(b"{}").envelope
    assert unsigned["signatures"] == []
    assert signing.signature_problem(unsigned, signing.load_public_key(other)).startswith("unsigned")


@pytest.mark.parametrize(
    ("kind", "fragment"),
    [
        ("sec1", "not a PKCS#8 PEM private key"),
        ("encrypted", "encrypted"),
        ("p384", "not an ECDSA P-256"),
        ("missing", "cannot read the signing key"),
        ("public", "not a PKCS#8"),
    ],
)
def test_a_key_that_will_not_do_is_refused_with_the_fix_and_never_shown(tmp_path, kind, fragment):
    key = ec.generate_private_key(ec.SECP384R1() if kind == "p384" else ec.SECP256R1())
    path = tmp_path / "key.pem"
    formats = {
        "sec1": (serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()),
        "encrypted": (serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")),
        "p384": (serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    }
    if kind in formats:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, *formats[kind]))
    elif kind == "public":
        path.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        )
    with pytest.raises(UsageError, match=fragment) as raised:
        signing.load_signing_key(path)
    if path.exists():
        body = b"".join(path.read_bytes().splitlines()[1:-1]).decode()
        assert body[:40] not in raised.value.message


def test_verify_refuses_a_private_key_given_as_the_public_one(tmp_path):
    private, _, _ = write_key(tmp_path)
    with pytest.raises(UsageError, match="holds a private key"):
        signing.load_public_key(private)


def test_keyless_needs_the_workflow_s_oidc_token_and_sigstore():
    with pytest.raises(UsageError, match="id-token: write"):
        keyless.check_prerequisites(keyless.token_offered({}), importable=True)
    with pytest.raises(UsageError, match="pip install sigstore"):
        keyless.check_prerequisites(False, importable=False)
    keyless.check_prerequisites(keyless.token_offered({name: "x" for name in keyless.TOKEN_VARIABLES}), importable=True)
    with pytest.raises(UsageError, match="without a key"):
        signing.prepare("keyless", "key.pem")


def test_keyless_layers_carry_cosign_s_rekor_bundle():
    log_id = bytes(range(32))
    inner = SimpleNamespace(
        inclusion_promise=SimpleNamespace(signed_entry_timestamp=b"set"),
        canonicalized_body=b"body",
        integrated_time="1700000000",
        log_index="7",
        log_id=SimpleNamespace(key_id=base64.b64encode(log_id).decode()),
    )
    found = keyless.rekor_bundle(SimpleNamespace(_inner=inner))
    assert found == {
        "SignedEntryTimestamp": base64.b64encode(b"set").decode(),
        "Payload": {
            "body": base64.b64encode(b"body").decode(),
            "integratedTime": 1700000000,
            "logIndex": 7,
            "logID": log_id.hex(),
        },
    }


# -- cosign's layout, the SBOM, and the check ---------------------------------------------------


def test_the_config_blob_is_the_one_cosign_writes():
    one = attestations.cosign_config(["sha256:" + "a" * 64])
    assert len(one) == 233  # the size of cosign's own, for one layer
    assert json.loads(one)["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + "a" * 64]}


NAMED = {"image": "r/m", "digest": DIGEST, "version": "1.0.0"}  # an SBOM's subject
BASE = {"base_image": "base", "base_image_id": "sha256:1", "triton": "2.51.0"}


def test_the_sbom_lists_each_environment_s_packages_and_the_image_s():
    document = sbom(
        **NAMED,
        **BASE,
        models={"a": [1, 2], "b": [1]},
        environments={"a": [Package("shared", "1.0", "f" * 64)]},
        system=[Package("numpy", "1.24.2", location="/usr/lib/python3/dist-packages")],
    )
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.6"
    assert listed_packages(document) == {("shared", "1.0"), ("numpy", "1.24.2")}
    [shared] = [c for c in document["components"] if c["name"] == "shared"]
    assert shared["purl"] == "pkg:pypi/shared@1.0"
    assert shared["hashes"] == [{"alg": "SHA-256", "content": "f" * 64}]
    model = next(d for d in document["dependencies"] if d["ref"] == "model:a")
    assert model["dependsOn"] == [shared["bom-ref"]]


def _unnamed(document: dict) -> dict:
    """`document` without what differs between two writings of it (its serial number and time)."""
    return {
        **{k: v for k, v in document.items() if k != "serialNumber"},
        "metadata": {k: v for k, v in document["metadata"].items() if k != "timestamp"},
    }


PREPARED = SimpleNamespace(
    base=SimpleNamespace(image="base", image_id="sha256:1", triton_version="2.51.0"),
    stub=SimpleNamespace(target_python="3.11"),
)
IMAGE_PACKAGES = ImagePackages("3.11", (Package("numpy", "1.24.2", location="/usr/lib/python3/dist-packages"),), {})
ENVIRONMENTS = {"a": (Package("x", "1"),)}


def _given(models: dict, packages: ImagePackages = IMAGE_PACKAGES) -> bytes:
    """What the evidence writes an SBOM from, as SbomBeside compares it."""
    return contents_arguments(**evidence_attach._contents_arguments(PREPARED, models, packages, ENVIRONMENTS))


def test_the_sbom_written_beside_the_tests_is_the_one_written_after(monkeypatch):
    monkeypatch.setattr(evidence_attach, "_packages", lambda _prepared: (None, IMAGE_PACKAGES, ENVIRONMENTS))
    models = {"a": [1, 2], "b": [1]}
    beside = evidence_attach.SbomBeside(PREPARED, models)
    written = beside.contents(_given(models))  # by `python -P -m triton_release.evidence.sbom`
    assert written is not None
    named = with_subject(written, **NAMED)
    after = sbom(**NAMED, **BASE, models=models, environments=ENVIRONMENTS, system=IMAGE_PACKAGES.system, python="3.11")
    assert _unnamed(named) == _unnamed(after)
    assert named["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": DIGEST.split(":")[1]}]
    # other models (the pushed image's labels say so), or other packages (the image's Python read
    # again after a failed probe): written again by the evidence
    assert beside.contents(_given({"a": [1, 2]})) is None
    assert beside.contents(_given(models, ImagePackages("", (), {}))) is None


def test_the_sbom_process_imports_nothing_from_the_folder_it_is_started_in(monkeypatch, tmp_path):
    """The release runs in the user's checkout: a json.py or packageurl.py there is not run."""
    monkeypatch.setattr(evidence_attach, "_packages", lambda _prepared: (None, IMAGE_PACKAGES, ENVIRONMENTS))
    for name in ("json.py", "packageurl.py"):
        (tmp_path / name).write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write({name!r})\n")
    (tmp_path / "triton_release").mkdir()
    (tmp_path / "triton_release" / "__init__.py").write_text("raise SystemExit(0)\n")
    monkeypatch.chdir(tmp_path)
    beside = evidence_attach.SbomBeside(PREPARED, {"a": [1]})
    assert beside.contents(_given({"a": [1]})) is not None and not (tmp_path / "ran").exists()


def test_an_sbom_process_that_is_late_is_stopped_and_left_to_the_evidence(monkeypatch, tmp_path):
    monkeypatch.setattr(evidence_attach, "_packages", lambda _prepared: (None, IMAGE_PACKAGES, ENVIRONMENTS))
    late = tmp_path / "python"
    late.write_text("#!/bin/sh\nexec sleep 30\n")
    late.chmod(0o755)
    monkeypatch.setattr(evidence_attach.sys, "executable", str(late))
    monkeypatch.setattr(evidence_attach.SbomBeside, "WAIT", 0.2)
    beside = evidence_attach.SbomBeside(PREPARED, {"a": [1]})
    assert beside.contents(_given({"a": [1]})) is None
    assert beside._child is not None and beside._child.poll() is not None  # stopped, not left running


@pytest.mark.parametrize("executable", ["/bin/false", "/nonexistent/python"])
def test_an_sbom_process_that_fails_leaves_the_sbom_to_the_evidence(monkeypatch, executable):
    monkeypatch.setattr(evidence_attach, "_packages", lambda _prepared: (None, IMAGE_PACKAGES, ENVIRONMENTS))
    monkeypatch.setattr(evidence_attach.sys, "executable", executable)
    beside = evidence_attach.SbomBeside(PREPARED, {})
    assert beside.contents(_given({})) is None


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("127.0.0.1:5000/team/models:1.4.0", ("127.0.0.1:5000/team/models", "1.4.0", None)),
        (f"ghcr.io/Org/Models@{DIGEST}", ("ghcr.io/org/models", None, DIGEST)),
    ],
)
def test_references(ref, expected):
    assert parse_reference(ref) == expected


@pytest.mark.parametrize("ref", ["127.0.0.1:5000/team/models", "models:1.0.0", "r/m@sha256:12"])
def test_a_reference_without_tag_or_digest_is_refused(ref):
    with pytest.raises(UsageError):
        parse_reference(ref)


class MemoryRegistry:
    """Blobs and manifests in memory, as the v2 client answers them (no referrers API)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[str, Manifest] = {}

    def __str__(self) -> str:
        return "127.0.0.1:5000/t/m"

    def put_blob(self, data: bytes) -> str:
        self.blobs[content_digest(data)] = data
        return content_digest(data)

    def blob(self, digest: str) -> bytes:
        return self.blobs[digest]

    def put_manifest(self, tag: str, manifest: Manifest) -> str:
        self.manifests[tag] = self.manifests[manifest.digest] = manifest
        return manifest.digest

    def manifest(self, reference: str) -> Manifest | None:
        return self.manifests.get(reference)

    def digest(self, reference: str) -> str | None:
        found = self.manifests.get(reference)
        return found.digest if found else None

    def referrers(self, digest: str) -> None:
        return None


def attach(
    registry,
    subject: str,
    signer: signing.Signing,
    kinds=(contract.GOLDEN_TYPE, contract.TEST_RESULT_TYPE, contract.PROVENANCE_TYPE, contract.SBOM_TYPE),
    passed: bool = True,
    tests_passed: bool = True,
) -> None:
    layers = []
    for kind in kinds:
        if kind == contract.TEST_RESULT_TYPE:
            payload = st.tests_statement(
                "r/m",
                subject,
                st.tests_predicate(passed=["a/one"], failed=[] if tests_passed else ["a/two"], warned=["gpu"]),
            )
        else:
            predicate = {"passed": passed, "models": []} if kind == contract.GOLDEN_TYPE else {}
            payload = st.statement("r/m", subject, kind, predicate)
        signed = signer.sign(payload)
        layers.append((signed.body, {attestations.PREDICATE_TYPE: kind, attestations.SIGNATURE: ""}))
    attestations.write(registry, subject, layers)


def test_the_check_passes_and_names_each_problem_otherwise(tmp_path):
    private, public, _ = write_key(tmp_path)
    key, signer = signing.load_public_key(public), signing.Signing("key", signing.load_signing_key(private))
    registry = MemoryRegistry()
    attach(registry, DIGEST, signer)
    checked = check(registry, "r/m:1.0.0", DIGEST, key)
    assert checked.ok and len(checked.found) == 4
    manifest = json.loads(registry.manifest(f"sha256-{'ab' * 32}.att").body)
    assert [layer["mediaType"] for layer in manifest["layers"]] == [attestations.DSSE_TYPE] * 4
    assert manifest["layers"][0]["annotations"] == {
        "predicateType": contract.GOLDEN_TYPE,
        "dev.cosignproject.cosign/signature": "",
    }

    attach(registry, OTHER, signer)  # another image's evidence under this one's tag
    registry.manifests[f"sha256-{'ab' * 32}.att"] = registry.manifests[f"sha256-{'cd' * 32}.att"]
    with pytest.raises(Refused, match="the subject does not match") as raised:
        check(registry, "r/m:1.0.0", DIGEST, key)
    assert raised.value.result.problems[0].startswith(
        "golden results, in-toto test results, SLSA provenance, CycloneDX SBOM: its subject"
    )

    attach(registry, DIGEST, signer, kinds=(contract.GOLDEN_TYPE,), passed=False)
    with pytest.raises(Refused) as raised:
        check(registry, "r/m:1.0.0", DIGEST, key)
    message = raised.value.message
    assert "not every tested case passed" in message and "no CycloneDX SBOM" in message
    assert "no SLSA provenance" in message

    attach(registry, DIGEST, signing.Signing("none"))
    with pytest.raises(Refused, match="unsigned"):
        check(registry, "r/m:1.0.0", DIGEST, key)

    attach(registry, DIGEST, signer, tests_passed=False)  # the golden results pass, the Test Results fail
    with pytest.raises(Refused) as raised:
        check(registry, "r/m:1.0.0", DIGEST, key)
    assert raised.value.result.problems == (
        "in-toto test results: the Test Results say 'fail', not 'pass' (failed: a/two)",
    )
    assert raised.value.result.tests == {"result": "fail", "passed": 1, "warned": ["gpu"], "failed": ["a/two"]}

    attach(registry, DIGEST, signer, kinds=(contract.GOLDEN_TYPE, contract.PROVENANCE_TYPE, contract.SBOM_TYPE))
    with pytest.raises(Refused) as raised:  # evidence made before the Test Results were attached
        check(registry, "r/m:1.0.0", DIGEST, key)
    assert raised.value.result.problems == (
        "no in-toto test results (https://in-toto.io/attestation/test-result/v0.1) is attached",
    )

    attach(registry, OTHER, signer)  # only the Test Results are another image's
    theirs = json.loads(registry.manifest(f"sha256-{'cd' * 32}.att").body)["layers"][1]
    attach(registry, DIGEST, signer, kinds=(contract.GOLDEN_TYPE, contract.PROVENANCE_TYPE, contract.SBOM_TYPE))
    own = json.loads(registry.manifest(f"sha256-{'ab' * 32}.att").body)["layers"]
    attestations.write(
        registry, DIGEST, [(registry.blob(d["digest"]), d["annotations"]) for d in [own[0], theirs, *own[1:]]]
    )
    with pytest.raises(Refused) as raised:
        check(registry, "r/m:1.0.0", DIGEST, key)
    [problem] = raised.value.result.problems
    assert problem.startswith("in-toto test results: its subject is sha256:cdcd") and "does not match" in problem

    with pytest.raises(Refused, match="no evidence is attached"):
        check(registry, "r/m:2.0.0", "sha256:" + "99" * 32, key)


def test_the_action_keeps_the_signing_key_in_a_private_file_for_the_run_only(tmp_path, capsys):
    import os
    import stat

    from triton_release.action.inputs import ActionInputs, key_files
    from triton_release.action.main import main

    private, _, _ = write_key(tmp_path)
    pem = private.read_text()
    env = {"INPUT_SIGNING-KEY": pem, "INPUT_VERIFY-KEY": "keys/cosign.pub", "RUNNER_TEMP": str(tmp_path)}
    inputs = ActionInputs.from_env(env)
    assert pem.splitlines()[1] not in repr(inputs)
    with key_files(inputs, env) as keys:
        made = Path(keys["signing_key"])
        assert made.read_text() == pem and stat.S_IMODE(os.stat(made).st_mode) == 0o600
        assert keys["verify_key"] == "keys/cosign.pub"
    assert not made.exists()
    main({**env, "INPUT_MODE": "no-such-mode", "GITHUB_WORKSPACE": str(tmp_path)})  # fails at once, masked first
    out = capsys.readouterr()
    body = pem.splitlines()[1]
    assert f"::add-mask::{body}" in out.out.splitlines()  # the runner hides it from here on
    shown = [line for line in (out.out + out.err).splitlines() if not line.startswith("::add-mask::")]
    assert not any(body in line for line in shown)


def test_the_step_summary_links_the_evidence_and_says_how_to_verify_it_or_that_it_is_unsigned():
    from triton_release.action.summary import summary
    from triton_release.evidence.attach import Evidence
    from triton_release.registry.attestations import Layer
    from triton_release.session import Report, StepRecord

    layers = tuple(
        Layer(kind, "sha256:" + str(i) * 64, 100, "key")
        for i, kind in enumerate((contract.GOLDEN_TYPE, contract.PROVENANCE_TYPE, contract.SBOM_TYPE))
    )
    signed = Evidence(
        "127.0.0.1:5000/t/m",
        "1.0.0",
        DIGEST,
        f"sha256-{'ab' * 32}.att",
        OTHER,
        layers,
        "key",
        "key sha256:" + "9" * 64,
        False,
        18000,
        "release",
        True,
    )
    report = Report("release")
    report.record("evidence", StepRecord(signed, 0.1, True))
    text = summary(report)
    assert f"sha256-{'ab' * 32}.att" in text and OTHER in text and all(layer.digest in text for layer in layers)
    assert f"triton-release verify 127.0.0.1:5000/t/m@{DIGEST} --key cosign.pub" in text
    unsigned = Report("release")
    unsigned.record(
        "evidence",
        StepRecord(
            Evidence(
                *[getattr(signed, f) for f in ("repository", "version", "digest", "tag", "manifest", "layers")],
                "none",
                "unsigned",
                False,
                18000,
                "release",
                True,
            ),
            0.1,
            True,
        ),
    )
    assert "**unsigned**" in summary(unsigned) and "signing-key" in summary(unsigned)
