"""The shard plan: groups kept together, balanced by cases and size, gpu shards, the label."""

from __future__ import annotations

import json

import pytest

from support.models import golden_case, pipeline_files, python_model_files
from triton_release.contract import candidate_tag
from triton_release.errors import Refused, UsageError
from triton_release.models.repository import Repository
from triton_release.models.shards import (
    Shard,
    changed_from_label,
    changed_label,
    check_shard_name,
    plan_shards,
    shards_from_label,
    shards_label,
)

GPU_GROUP = "instance_group [ { kind: KIND_GPU count: 1 } ]\n"


def models(*names: str, cases: int = 1) -> dict:
    files = {}
    for name in names:
        files.update(python_model_files(name))
        for i in range(1, cases):
            files[f"{name}/golden/more{i}.json"] = golden_case()
    return files


def repo_of(make_repo, files: dict) -> Repository:
    return Repository.load(make_repo(files))


def all_tested(plan: list[Shard]) -> list[str]:
    return sorted(m for s in plan for m in s.models)


def test_three_models_as_three_shards_named_in_order(make_repo):
    repo = repo_of(make_repo, models("c", "a", "b"))
    plan = plan_shards(repo, ["c", "a", "b"], shards=3)
    assert [(s.name, s.models, s.load, s.cases, s.gpu) for s in plan] == [
        ("shard-1", ("a",), ("a",), 1, False),
        ("shard-2", ("b",), ("b",), 1, False),
        ("shard-3", ("c",), ("c",), 1, False),
    ]


def test_no_names_no_shards_and_never_more_shards_than_groups(make_repo):
    repo = repo_of(make_repo, models("a", "b"))
    assert plan_shards(repo, []) == []
    assert len(plan_shards(repo, ["a", "b"], shards=5)) == 2


def test_an_ensemble_and_its_steps_stay_in_one_shard(make_repo):
    repo = repo_of(
        make_repo, {**models("first", "second", "other1", "other2"), **pipeline_files("pipe", "first", "second")}
    )
    plan = plan_shards(repo, ["first", "second", "pipe", "other1", "other2"], shards=3)
    holding = next(s for s in plan if "pipe" in s.models)
    assert set(holding.models) == {"first", "second", "pipe"}  # the steps are tested where they are loaded
    assert set(holding.load) == {"first", "second", "pipe"}
    assert all_tested(plan) == ["first", "other1", "other2", "pipe", "second"]  # each tested exactly once


def test_an_ensemble_alone_loads_its_unchanged_steps(make_repo):
    repo = repo_of(make_repo, {**models("first", "second", "x"), **pipeline_files("pipe", "first", "second")})
    plan = plan_shards(repo, ["pipe", "x"], shards=2)
    pipe = next(s for s in plan if s.models == ("pipe",))
    assert pipe.load == ("first", "pipe", "second")


def test_a_shared_step_is_tested_once_and_loaded_by_every_user(make_repo):
    repo = repo_of(
        make_repo, {**models("tok", "a", "b"), **pipeline_files("pa", "tok", "a"), **pipeline_files("pb", "tok", "b")}
    )
    plan = plan_shards(repo, ["tok", "pa", "pb"], shards=2)
    assert all_tested(plan) == ["pa", "pb", "tok"]
    assert all("tok" in s.load for s in plan)


def test_shards_balance_by_golden_cases(make_repo):
    files = {**models("heavy", cases=13), **models("m1", "m2", "m3", "m4", "m5", cases=2)}
    repo = repo_of(make_repo, files)  # weights: heavy 14, the others 3 each
    plan = plan_shards(repo, ["heavy", "m1", "m2", "m3", "m4", "m5"], shards=2)
    assert sorted(s.models for s in plan) == [("heavy",), ("m1", "m2", "m3", "m4", "m5")]
    assert sorted(s.cases for s in plan) == [10, 13]


def test_size_counts_ten_mib_as_one_case(make_repo):
    files = {**models("big", "s1", "s2", "s3"), "big/1/weights.bin": b"\0" * (30 << 20)}
    repo = repo_of(make_repo, files)
    plan = plan_shards(repo, ["big", "s1", "s2", "s3"], shards=2)  # big weighs 2 + 3, the others 2 each
    assert sorted(s.models for s in plan) == [("big",), ("s1", "s2", "s3")]


def test_max_models_per_shard(make_repo):
    names = [f"m{i:02d}" for i in range(7)]
    repo = repo_of(make_repo, models(*names))
    plan = plan_shards(repo, names, max_models=3)
    assert sorted(len(s.models) for s in plan) == [2, 2, 3]
    assert all(len(s.models) <= 3 for s in plan) and all_tested(plan) == names


def test_a_group_bigger_than_the_limit_is_a_shard_of_its_own(make_repo):
    repo = repo_of(make_repo, {**models("first", "second", "x"), **pipeline_files("pipe", "first", "second")})
    plan = plan_shards(repo, ["first", "second", "pipe", "x"], max_models=2)
    assert sorted(s.models for s in plan) == [("first", "pipe", "second"), ("x",)]


def test_the_default_is_one_shard_per_25_models_at_most_8(make_repo):
    names = [f"m{i:03d}" for i in range(60)]
    repo = repo_of(make_repo, models(*names))
    assert len(plan_shards(repo, names)) == 3
    assert len(plan_shards(repo, names[:10])) == 1


def test_the_same_input_makes_the_same_plan(make_repo):
    names = [f"m{i:02d}" for i in range(12)]
    repo = repo_of(make_repo, models(*names))
    assert plan_shards(repo, names, shards=4) == plan_shards(repo, list(reversed(names)), shards=4)


def test_a_shard_loading_a_kind_gpu_model_is_a_gpu_shard(make_repo):
    files = models("cpu1", "gpu1", "cpu2")
    files["gpu1/config.pbtxt"] += GPU_GROUP
    repo = repo_of(make_repo, {**files, **pipeline_files("pipe", "gpu1", "cpu2")})
    plan = plan_shards(repo, ["cpu1", "pipe"], shards=2)
    assert {s.models: s.gpu for s in plan} == {("cpu1",): False, ("pipe",): True}  # it loads gpu1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"shards": 0}, "1 to 256"),
        ({"shards": 300}, "1 to 256"),
        ({"max_models": 0}, "1 or more"),
        ({"shards": 2, "max_models": 2}, "not both"),
    ],
)
def test_bad_counts_are_usage_errors(make_repo, kwargs, match):
    repo = repo_of(make_repo, models("a"))
    with pytest.raises(UsageError, match=match):
        plan_shards(repo, ["a"], **kwargs)


def test_an_unknown_model_is_a_usage_error(make_repo):
    with pytest.raises(UsageError, match="'nope', which is no model in"):
        plan_shards(repo_of(make_repo, models("a")), ["a", "nope"])


def test_the_label_round_trips_and_the_matrix_entry_is_flat(make_repo):
    repo = repo_of(make_repo, {**models("first", "second", "x"), **pipeline_files("pipe", "first", "second")})
    plan = plan_shards(repo, ["pipe", "x"], shards=2)
    assert shards_from_label(shards_label(plan)) == plan
    entry = next(s for s in plan if s.models == ("pipe",)).matrix_entry()
    assert entry == {"name": entry["name"], "models": "pipe", "load": "first,pipe,second", "cases": 1, "gpu": False}
    assert json.loads(json.dumps([s.matrix_entry() for s in plan]))  # what fromJSON() takes


def test_the_plan_counts_each_models_golden_cases_in_its_label(make_repo):
    repo = repo_of(make_repo, {**models("a", cases=3), **models("b")})
    [shard] = plan_shards(repo, ["a", "b"], shards=1)
    assert shard.case_counts() == {"a": 3, "b": 1} and shard.cases == 4
    assert json.loads(shards_label([shard]))[0]["model_cases"] == {"a": 3, "b": 1}
    assert shards_from_label(shards_label([shard])) == [shard]
    assert "model_cases" not in shard.matrix_entry()
    with pytest.raises(Refused, match="triton-release.shards"):
        shards_from_label('[{"name": "shard-1", "models": ["a", "b"], "model_cases": {"a": 3}}]')


def test_a_short_label_of_names_and_models_is_read_too():
    plan = shards_from_label('[{"name": "shard-1", "models": ["a", "b"]}]')
    assert plan == [Shard("shard-1", ("a", "b"), ("a", "b"), 0, False)]
    assert plan[0].case_counts() is None  # a plan from before: promote refuses it


@pytest.mark.parametrize("text", [None, "", "{}", "[1]", '[{"name": "x; rm", "models": []}]', "[{"])
def test_a_missing_or_broken_label_is_refused(text):
    with pytest.raises(Refused, match="triton-release.shards"):
        shards_from_label(text)


def test_changed_label_round_trips():
    assert changed_from_label(changed_label(["b", "a", "b"])) == ["a", "b"]
    with pytest.raises(Refused, match="triton-release.changed"):
        changed_from_label('{"a": 1}')


def test_candidate_tag_and_shard_names():
    assert candidate_tag("0123456789abcdef" * 2 + "01234567") == "candidate-0123456789ab"
    with pytest.raises(UsageError):
        candidate_tag("HEAD")
    assert check_shard_name("shard-12") == "shard-12"
    for bad in ("shard-0", "shard-a", "../x", "shard-1:latest", ""):
        with pytest.raises(UsageError):
            check_shard_name(bad)
