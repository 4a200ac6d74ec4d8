"""Answers kept by content between runs: a thousand unchanged configs are parsed once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support.models import bls_caller_files, ensemble_files, python_model_files
from triton_release import cache
from triton_release.cache import Memo
from triton_release.models import calls, repository
from triton_release.models import validate as validate_module


def test_an_answer_is_kept_by_content_across_processes_and_the_oldest_are_dropped(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_root", tmp_path)
    memo = Memo("t", "1", keep=2)
    memo.put("a", [1])
    memo.put(b"b", {"x": 2})
    assert memo.get("a") == [1]  # "a" is now the most recently used
    memo.put("c", 3)
    memo.save()
    again = Memo("t", "1", keep=2)
    assert (again.get("a"), again.get("b"), again.get("c")) == ([1], None, 3)
    assert Memo("t", "2").get("a") is None  # another version: another file


def test_a_parsed_config_and_a_model_s_calls_come_back_the_same_from_the_memo(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_root", tmp_path)
    monkeypatch.setattr(repository, "PARSED", Memo("config-pbtxt", "test"))
    monkeypatch.setattr(calls, "FOUND", Memo("bls-calls", "test"))
    text = 'name: "m"\nbackend: "python"\nmax_batch_size: 4\n'
    first, _ = repository.parse_config(Path("config.pbtxt"), text)
    second, problems = repository.parse_config(Path("config.pbtxt"), text)
    assert first == second and not problems and second.max_batch_size == 4
    bad, problems = repository.parse_config(Path("config.pbtxt"), "name: ")
    assert bad is None and problems  # a failure is never remembered as a config
    source = "import x\nr = pb_utils.InferenceRequest(model_name='b', inputs=[])\n"
    assert calls.calls_in(source) == calls.calls_in(source) == [calls.Call("b", 2)]


# -- validate: a model folder's verdict, kept by its fingerprint ------------------------------


def _fresh_verdicts(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(cache, "_root", tmp_path / "cache")
    monkeypatch.setattr(validate_module, "_VERDICTS", Memo("model-verdict", "test"))


def _judged(monkeypatch) -> list[str]:
    """The models that validate checks anew (not answered from the memo)."""
    judged: list[str] = []
    judge = validate_module.judge

    def counting(model, repo, *options):
        judged.append(model.name)
        return judge(model, repo, *options)

    monkeypatch.setattr(validate_module, "judge", counting)
    return judged


def test_an_unchanged_model_folder_is_not_checked_again_and_gives_the_same_verdict(make_repo, tmp_path, monkeypatch):
    _fresh_verdicts(tmp_path, monkeypatch)
    files = {**python_model_files("a"), **python_model_files("b"), "b/1/model.py": "def broken(:\n"}
    del files["b/golden/basic.json"]  # a warning: no golden cases
    root = make_repo(files)
    first = validate_module.validate(root)
    judged = _judged(monkeypatch)
    second = validate_module.validate(root)
    assert judged == []
    assert [str(p) for p in second.problems] == [str(p) for p in first.problems] and "syntax error" in str(
        first.problems[0]
    )
    assert [str(w) for w in second.warnings] == [str(w) for w in first.warnings] and first.warnings
    assert second.golden_cases == first.golden_cases == 1 and second.models == ("a", "b")

    (root / "b" / "1" / "model.py").write_text((root / "a" / "1" / "model.py").read_text())
    assert validate_module.validate(root).ok and judged == ["b"]


def test_a_call_s_problem_follows_the_callee_though_the_caller_is_not_checked_again(make_repo, tmp_path, monkeypatch):
    _fresh_verdicts(tmp_path, monkeypatch)
    root = make_repo({**bls_caller_files("caller", "callee"), **python_model_files("callee")})
    assert validate_module.validate(root).ok
    judged = _judged(monkeypatch)
    shutil.rmtree(root / "callee")
    problems = [str(p) for p in validate_module.validate(root).problems]
    assert judged == [] and len(problems) == 1 and "calls model 'callee'" in problems[0]


def test_ensembles_and_folders_holding_links_are_checked_every_time(make_repo, tmp_path, monkeypatch):
    _fresh_verdicts(tmp_path, monkeypatch)
    root = make_repo({**python_model_files("step"), **ensemble_files("pipe", ["step"]), **python_model_files("m")})
    (root / "m" / "shared.txt").symlink_to(root / "step" / "config.pbtxt")
    assert repository.fingerprint(root / "m") is None and repository.fingerprint(root / "step") is not None
    validate_module.validate(root)
    judged = _judged(monkeypatch)
    validate_module.validate(root)
    assert sorted(judged) == ["m", "pipe"]


def test_a_fingerprint_sees_names_kinds_and_small_contents_and_large_files_by_stat(tmp_path):
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text("x = 1\n")
    (folder / "1" / "weights.bin").write_bytes(b"\0" * (repository.SMALL_FILE + 1))
    seen = {repository.fingerprint(folder)}
    (folder / "1" / "model.py").write_text("x = 2\n")  # same size, other content
    seen.add(repository.fingerprint(folder))
    (folder / "1" / "model.py").rename(folder / "1" / "model2.py")
    seen.add(repository.fingerprint(folder))
    (folder / "2").mkdir()
    seen.add(repository.fingerprint(folder))
    weights = folder / "1" / "weights.bin"
    weights.write_bytes(b"\1" * (repository.SMALL_FILE + 1))  # rewritten: its change time moves
    os.utime(weights, ns=(1, 1))
    seen.add(repository.fingerprint(folder))
    assert len(seen) == 5 and repository.fingerprint(folder) == repository.fingerprint(folder)


def test_a_remembered_verdict_keeps_the_problems_order_and_the_working_directory_s_paths(
    make_repo, tmp_path, monkeypatch
):
    _fresh_verdicts(tmp_path, monkeypatch)
    files = {**bls_caller_files("caller", "gone"), "caller/golden/basic.json": "{ not json"}
    root = make_repo(files)
    first = [str(p) for p in validate_module.validate(root).problems]
    assert "calls model 'gone'" in first[0] and "golden" in first[-1]  # calls before golden cases, as always
    assert [str(p) for p in validate_module.validate(root).problems] == first
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    judged = _judged(monkeypatch)
    validate_module.validate(root)
    assert judged == ["caller"]  # paths are shown relative to another directory: checked anew


def test_a_large_golden_file_is_fingerprinted_by_content(tmp_path):
    folder = tmp_path / "m"
    (folder / "golden").mkdir(parents=True)
    case = folder / "golden" / "big.json"
    case.write_bytes(b"[" + b"0," * repository.SMALL_FILE + b"0]")
    before = repository.fingerprint(folder)
    info = case.stat()
    with open(case, "r+b") as handle:  # the same size, the times put back: only the content tells
        handle.seek(1)
        handle.write(b"1")
    os.utime(case, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert repository.fingerprint(folder) != before
