"""Drift is never 0.0 for a model whose environment changed: version N would answer with N+1's
environment in this image, so the report says its drift could not be measured."""

from __future__ import annotations

from support.models import PYTHON_MODEL, python_model_files
from triton_release.image.prepared import Prepared
from triton_release.models.drift import DriftMeter
from triton_release.models.repository import Repository
from triton_release.steps.golden import check_drift


class Server:
    unloadable: dict = {}
    overrides: dict = {}
    apart: dict = {}

    def model_ready(self, name, version):
        raise AssertionError("a model whose drift cannot be measured is not reloaded")

    def load_configs(self, loads):
        assert not loads
        return {}


def prepared_with_changed(*models: str) -> Prepared:
    """What a build found: `models`' environments changed since the release compared with."""
    return Prepared(None, None, None, models, "127.0.0.1:5000/t/m:1.0.0")  # type: ignore[arg-type]


def test_a_model_whose_environment_changed_is_reported_unmeasured_never_zero(make_repo):
    root = make_repo({**python_model_files("a"), "a/2/model.py": PYTHON_MODEL})
    why = prepared_with_changed("a").drift_unmeasurable
    meter = DriftMeter(Repository.load(root), Server(), {"a": 1}, {"a": 2}, unmeasurable=why)
    meter.after_wave(["a"], [])
    (found,) = meter.results
    assert not found.compared and "environment changed since 127.0.0.1:5000/t/m:1.0.0" in found.note
    assert "cannot be measured" in found.to_json()["note"]


def test_the_fanout_candidate_carries_which_models_drift_cannot_be_measured_for():
    """stage labels the candidate with Prepared.drift_unmeasurable; each shard's test reads it back, so a
    shard never reports drift 0.0 for a model whose environment changed."""
    from triton_release.contract import CHANGED_LABEL, DRIFT_UNMEASURABLE_LABEL, SHARDS_LABEL
    from triton_release.models.shards import (
        Shard,
        shards_label,
        unmeasurable_from_label,
        unmeasurable_label,
    )
    from triton_release.registry.candidate import Candidate

    why = prepared_with_changed("a").drift_unmeasurable
    labels = {
        SHARDS_LABEL: shards_label([Shard("shard-1", ("a",), ("a",), 1, False, (1,))]),
        CHANGED_LABEL: '["a"]',
        DRIFT_UNMEASURABLE_LABEL: unmeasurable_label(why),
    }
    found = Candidate.from_labels("127.0.0.1:5000/t/m", "sha256:" + "ab" * 32, labels)
    assert found.drift_unmeasurable == why
    assert "environment changed" in found.drift_unmeasurable["a"]
    # a candidate staged before the label, or a label someone else wrote: drift measured as before
    assert unmeasurable_from_label(None) == unmeasurable_from_label("[1]") == unmeasurable_from_label("{") == {}
    assert unmeasurable_from_label('{"a": 3, "b": "why"}') == {"b": "why"}


def test_with_max_drift_an_unmeasured_drift_refuses_and_is_never_0(make_repo):
    """An environment change: N would answer with N+1's environment here. The report says so (no
    figure), and a drift gate given a bound refuses what it could not decide."""
    import pytest

    from triton_release.errors import Refused
    from triton_release.models.suite import GoldenRun

    root = make_repo({**python_model_files("a"), "a/2/model.py": PYTHON_MODEL})
    why = prepared_with_changed("a").drift_unmeasurable
    meter = DriftMeter(Repository.load(root), Server(), {"a": 1}, {"a": 2}, unmeasurable=why)
    meter.after_wave(["a"], [])
    (found,) = meter.results
    assert found.unmeasured and found.to_json()["max_rel_diff"] is None
    run = GoldenRun("img", ("a",), (), (), drift=(found,))
    with pytest.raises(Refused, match="could not be measured, and max_drift 0.01 is set") as refused:
        check_drift(run, 0.01)
    assert "environment changed" in refused.value.message and "Nothing is released" in refused.value.message


def test_a_new_model_has_nothing_to_compare_and_is_not_refused():
    from triton_release.models.drift import ModelDrift
    from triton_release.models.suite import GoldenRun

    new = ModelDrift("b", 1, None, note="no version before 1 in the image (a new model): nothing to compare")
    check_drift(GoldenRun("img", ("b",), (), (), drift=(new,)), 0.01)
