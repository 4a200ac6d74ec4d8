"""Shard results and promote's checks (registry/candidate/), on plain data: a result's JSON, its
tag, and what a promote refuses (every shard at fault named)."""

from __future__ import annotations

import hashlib
import json

import pytest

from support.registries import FakeRegistry
from triton_release.contract import CHANGED_LABEL, SHARDS_LABEL, shard_result_tag
from triton_release.errors import Refused, UsageError
from triton_release.models.shards import Shard, shards_label
from triton_release.registry.candidate import Candidate, CandidateCheck, parse_reference, problems, refusal, review
from triton_release.registry.candidate.shard_results import ShardResult
from triton_release.registry.client import RegistryRepository
from triton_release.registry.credentials import Credentials

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
COMMIT = "0123456789abcdef" * 2 + "01234567"


def candidate(
    *shards: tuple[str, tuple[str, ...]], changed: tuple[str, ...] | None = None, version: str = "1.2.0", cases: int = 1
) -> Candidate:
    """A staged candidate whose plan holds `cases` golden cases of each model."""
    plan = [Shard(name, models, models, cases * len(models), False, (cases,) * len(models)) for name, models in shards]
    labels = {
        SHARDS_LABEL: shards_label(plan),
        CHANGED_LABEL: json.dumps(sorted(changed if changed is not None else {m for _, ms in shards for m in ms})),
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": COMMIT,
    }
    return Candidate.from_labels("127.0.0.1:5000/team/models", DIGEST, labels)


def record(
    shard: str, models: tuple[str, ...], passed: bool = True, failed: tuple[str, ...] = (), digest: str = DIGEST
) -> ShardResult:
    cases = tuple({"case": f"{m}/basic", "passed": f"{m}/basic" not in failed} for m in models)
    return ShardResult(digest, shard, models, passed, cases, COMMIT)


TWO = (("shard-1", ("a", "b")), ("shard-2", ("c",)))


def test_a_record_survives_its_json():
    original = record("shard-1", ("a", "b"), passed=False, failed=("b/basic",))
    text = json.dumps(original.to_json())
    assert ShardResult.from_json(json.loads(text)) == original
    assert original.failed_cases == ["b/basic"]
    assert json.loads(text) == {
        "candidate": DIGEST,
        "shard": "shard-1",
        "models": ["a", "b"],
        "passed": False,
        "cases": [{"case": "a/basic", "passed": True}, {"case": "b/basic", "passed": False}],
        "revision": COMMIT,
        "cases_run": 2,
    }


def test_a_record_states_the_cases_planned_and_run_and_the_models_set_aside():
    original = ShardResult(
        DIGEST,
        "shard-1",
        ("a", "gpu"),
        True,
        ({"case": "a/basic", "passed": True},),
        COMMIT,
        planned_cases=(("a", 2), ("gpu", 1)),
        needs_gpu=(("gpu", "CUDA is required"),),
    )
    data = json.loads(json.dumps(original.to_json()))
    assert (data["planned_cases"], data["cases_run"], data["needs_gpu"]) == (
        {"a": 2, "gpu": 1},
        1,
        {"gpu": "CUDA is required"},
    )
    assert ShardResult.from_json(data) == original
    assert original.untested({"a": 2, "gpu": 1}) == [("a", 1, 2, ""), ("gpu", 0, 1, "CUDA is required")]
    assert original.untested({"a": 1}) == [("gpu", 0, 0, "CUDA is required")]  # set aside: untested, cases or not
    with pytest.raises(ValueError, match="'cases_run' is 3"):
        ShardResult.from_json({**data, "cases_run": 3})
    with pytest.raises(ValueError, match="'planned_cases'"):
        ShardResult.from_json({**data, "planned_cases": {"a": -1}})


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ([], "not a JSON object"),
        (
            {"candidate": DIGEST, "shard": "shard-1", "models": ["a"], "passed": "yes", "cases": [], "revision": ""},
            "'passed'",
        ),
        (
            {"candidate": DIGEST, "shard": "shard-1", "models": [1], "passed": True, "cases": [], "revision": ""},
            "'models'",
        ),
        (
            {
                "candidate": DIGEST,
                "shard": "shard-1",
                "models": ["a"],
                "passed": True,
                "cases": [{"case": "a/x"}],
                "revision": "",
            },
            "'cases'",
        ),
    ],
)
def test_what_is_not_a_record_says_what_is_wrong(broken, why):
    with pytest.raises(ValueError, match=why):
        ShardResult.from_json(broken)


def test_the_shard_result_tag_names_the_candidate_digest_and_the_shard():
    assert shard_result_tag(DIGEST, "shard-3") == f"sha256-{'ab' * 32}.golden-shard-3"
    assert len(shard_result_tag(DIGEST, "s" * 49)) <= 128  # a registry tag's limit
    for digest, shard in (
        (DIGEST[:-1], "shard-1"),
        ("md5:" + "ab" * 16, "shard-1"),
        (DIGEST, "../x"),
        (DIGEST, "s" * 50),
        (DIGEST, ""),
    ):
        with pytest.raises(UsageError):
            shard_result_tag(digest, shard)


def test_a_candidate_is_given_by_its_digest():
    assert parse_reference(f"127.0.0.1:5000/team/models@{DIGEST}") == ("127.0.0.1:5000/team/models", DIGEST)
    for ref in ("127.0.0.1:5000/team/models:candidate-0123456789ab", f"models@{DIGEST[:-2]}", "", f"@{DIGEST}"):
        with pytest.raises(UsageError, match="REPO@sha256"):
            parse_reference(ref)


def test_passing_records_of_every_shard_covering_the_change_allow_the_promote():
    found = {"shard-1": record("shard-1", ("a", "b")), "shard-2": record("shard-2", ("c",))}
    assert problems(candidate(*TWO), found, "1.2.0") == []


def test_only_removed_models_need_no_record():
    assert problems(candidate(changed=()), {}, "1.2.0") == []


def test_every_missing_shard_is_named():
    plan = candidate(*TWO, ("shard-3", ("d",)))
    found = problems(plan, {"shard-1": record("shard-1", ("a", "b"))}, "1.2.0")
    assert found == ["no record for shard-2, shard-3 (the test job of those shards did not run or did not finish)"]


def test_a_record_for_another_candidate_is_refused():
    found = problems(
        candidate(*TWO),
        {"shard-1": record("shard-1", ("a", "b")), "shard-2": record("shard-2", ("c",), digest=OTHER)},
        "1.2.0",
    )
    assert found == [f"the record of shard-2 is for {OTHER}, another candidate"]


def test_a_failed_shard_names_its_failed_cases():
    found = problems(
        candidate(*TWO),
        {
            "shard-1": record("shard-1", ("a", "b"), passed=False, failed=("b/basic",)),
            "shard-2": record("shard-2", ("c",), passed=False),
        },
        "1.2.0",
    )
    assert found == [
        "shard-1 failed: b/basic",
        "shard-2 failed before any case failed (a model did not load, or the test stopped)",
    ]


def passed_without_cases(shard: str, models: tuple[str, ...], needs_gpu: tuple = ()) -> ShardResult:
    return ShardResult(DIGEST, shard, models, True, (), COMMIT, needs_gpu=needs_gpu)


def test_a_passing_record_that_ran_fewer_cases_than_planned_is_refused_naming_its_models():
    plan = candidate(("shard-1", ("a", "b")), ("shard-2", ("c",)), cases=2)
    short = ShardResult(
        DIGEST,
        "shard-1",
        ("a", "b"),
        True,
        ({"case": "a/basic", "passed": True}, {"case": "a/more", "passed": True}),
        COMMIT,
    )
    found = problems(plan, {"shard-1": short, "shard-2": passed_without_cases("shard-2", ("c",))}, "1.2.0")
    assert found == [
        "shard-1 left b (ran 0 of 2 planned golden cases) untested",
        "shard-2 left c (ran 0 of 2 planned golden cases) untested",
    ]
    assert "no passing record covers" not in " ".join(found)  # named once, where it happened


def test_a_model_set_aside_for_lacking_a_gpu_is_refused_unless_gpu_models_test_accepts_it():
    plan = candidate(("shard-1", ("a",)), ("shard-2", ("gpu",)))
    records = {
        "shard-1": record("shard-1", ("a",)),
        "shard-2": passed_without_cases("shard-2", ("gpu",), (("gpu", "RuntimeError: CUDA is required"),)),
    }
    found = problems(plan, records, "1.2.0")
    assert found == [
        "shard-2 left gpu (needs a GPU: RuntimeError: CUDA is required; ran 0 of 1 planned golden case) untested"
    ]
    check = CandidateCheck(plan, tuple(records.items()), tuple(found))
    assert "--gpus all" in refusal(check).message and "gpu_models test" in refusal(check).message
    assert review(plan, records, "1.2.0", "test") == ([], [("gpu", "RuntimeError: CUDA is required")])
    accepted = CandidateCheck(plan, tuple(records.items()), (), (("gpu", "RuntimeError: CUDA is required"),))
    assert accepted.to_json()["shipped_untested"] == {"gpu": "RuntimeError: CUDA is required"}
    assert [(s["cases_planned"], s["cases_run"]) for s in accepted.to_json()["shards"]] == [(1, 1), (1, 0)]


def test_a_shard_plan_that_does_not_count_each_models_cases_is_refused():
    labels = {
        SHARDS_LABEL: '[{"name": "shard-1", "models": ["a"], "cases": 1}]',
        CHANGED_LABEL: '["a"]',
        "org.opencontainers.image.version": "1.2.0",
    }
    plan = Candidate.from_labels("127.0.0.1:5000/team/models", DIGEST, labels)
    assert problems(plan, {"shard-1": record("shard-1", ("a",))}, "1.2.0") == [
        "the plan of shard-1 does not say how many golden cases of each model it must run (the candidate was "
        "staged by an earlier triton-release)"
    ]


def test_records_must_cover_every_changed_model():
    plan = candidate(*TWO, changed=("a", "b", "c", "e"))
    found = problems(plan, {"shard-1": record("shard-1", ("a",)), "shard-2": record("shard-2", ("c",))}, "1.2.0")
    assert found == ["no passing record covers the changed models b, e"]


def test_the_version_must_be_the_planned_one():
    found = {"shard-1": record("shard-1", ("a", "b")), "shard-2": record("shard-2", ("c",))}
    assert problems(candidate(*TWO), found, "1.3.0") == ["--version 1.3.0 is not the candidate's planned version 1.2.0"]


def test_the_refusal_names_every_problem_and_exits_1():
    plan = candidate(*TWO)
    records = {"shard-1": record("shard-1", ("a", "b"), passed=False, failed=("a/basic",)), "shard-2": None}
    check = CandidateCheck(plan, tuple(records.items()), tuple(problems(plan, records, "2.0.0")))
    error = refusal(check)
    assert isinstance(error, Refused) and error.exit_code == 1 and error.result is check
    for part in (
        "--version 2.0.0",
        "planned version 1.2.0",
        "no record for shard-2",
        "shard-1 failed: a/basic",
        "Nothing was tagged",
        f"{plan.ref}",
    ):
        assert part in error.message
    shards = check.to_json()["shards"]
    assert [(s["name"], s["found"], s["passed"], s["failed_cases"]) for s in shards] == [
        ("shard-1", True, False, ["a/basic"]),
        ("shard-2", False, False, []),
    ]


def test_a_candidate_without_a_shard_plan_is_refused():
    with pytest.raises(Refused, match=SHARDS_LABEL):
        Candidate.from_labels("127.0.0.1:5000/team/models", DIGEST, {CHANGED_LABEL: "[]"})


# -- blob uploads, on a loopback registry that answers only what these tests set up -----------


def blob_registry(location: str, uploads: list, existing: set | None = None) -> FakeRegistry:
    """Answers a blob HEAD (200 for `existing` digests), the upload POST with `location`, and the
    PUT that finishes it, whose path and body land in `uploads`."""

    def hook(handler) -> bool:
        path = handler.path
        if handler.command == "HEAD" and "/blobs/sha256:" in path:
            handler._send(200 if path.rsplit("/", 1)[1] in (existing or set()) else 404)
        elif handler.command == "POST" and path.endswith("/blobs/uploads/"):
            handler._send(202, None, {"Location": location})
        elif handler.command == "PUT" and "/uploads/" in path:
            uploads.append((path, handler.rfile.read(int(handler.headers["Content-Length"]))))
            handler._send(201)
        else:
            return False
        return True

    return FakeRegistry(auth=False, hook=hook)


def test_a_blob_goes_up_in_one_put_naming_its_digest_and_only_once():
    uploads: list = []
    data = b'{"passed":true}'
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with blob_registry("/v2/team/models/blobs/uploads/u-1?_state=abc", uploads) as fake:
        assert RegistryRepository.parse(f"{fake.address}/team/models").put_blob(data) == digest
    assert uploads == [(f"/v2/team/models/blobs/uploads/u-1?_state=abc&digest={digest.replace(':', '%3A')}", data)]
    uploads.clear()
    with blob_registry("/v2/team/models/blobs/uploads/u-2", uploads, {digest}) as fake:
        assert RegistryRepository.parse(f"{fake.address}/team/models").put_blob(data) == digest
        assert [m for m, _ in fake.requests] == ["HEAD"]
    assert uploads == []


def test_an_upload_sent_to_another_host_is_refused_and_nothing_goes_there():
    uploads: list = []
    with blob_registry("http://198.51.100.7:5000/v2/team/models/blobs/uploads/u-1", uploads) as fake:
        repo = RegistryRepository.parse(f"{fake.address}/team/models", Credentials("bot", "s3cret-pw", "test"))
        with pytest.raises(Refused, match="198.51.100.7:5000") as refused:
            repo.put_blob(b"{}")
    assert "s3cret-pw" not in refused.value.message and uploads == []


def test_promote_ships_gpu_only_models_untested_only_when_the_user_says_gpu_models_test(tmp_path):
    from triton_release.fanout.promote import gpu_policy
    from triton_release.settings import resolve

    assert gpu_policy(resolve({}, cwd=tmp_path)) == "require"  # the default tests on CPU; ships nothing untested
    (tmp_path / "triton-release.yaml").write_text("gpu_models: test\n")
    assert gpu_policy(resolve({}, cwd=tmp_path)) == "test"


def test_changed_models_after_promote_are_the_changed_models_as_in_a_release():
    """`changed-models` says one thing in every mode: the models whose files changed. A candidate
    also tests others (callers, environment changes): those are its `tested_models`."""
    from triton_release.contract import CHANGED_MODELS_LABEL

    plan = [Shard("shard-1", ("a", "caller"), ("a", "caller"), 2, False, (1, 1))]
    labels = {SHARDS_LABEL: shards_label(plan), CHANGED_LABEL: '["a","caller"]', CHANGED_MODELS_LABEL: '["a"]'}
    check = CandidateCheck(Candidate.from_labels("127.0.0.1:5000/team/models", DIGEST, labels), (), ())
    assert check.facts()["changed_models"] == ["a"]
    assert check.to_json()["changed_models"] == ["a"] and check.to_json()["tested_models"] == ["a", "caller"]
    del labels[CHANGED_MODELS_LABEL]  # staged before the label: the models it tested, as before
    older = CandidateCheck(Candidate.from_labels("127.0.0.1:5000/team/models", DIGEST, labels), (), ())
    assert older.facts()["changed_models"] == ["a", "caller"]
