"""Answers kept by content between runs: a thousand unchanged configs are parsed once."""

from __future__ import annotations

from pathlib import Path

from triton_release import cache
from triton_release.cache import Memo
from triton_release.models import calls, repository


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
