"""The latency gate stops its rounds early once a stricter interval has decided, and only then:
the early looks' confidence, Student's t quantiles, the early interval, and the meter driving a
small perf_analyzer script that answers with the figures each test gives it."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from support.models import python_model_files, write_tree
from triton_release.models.latency import LatencyMeter, LatencyOptions, stats
from triton_release.models.latency.perf_analyzer import PerfAnalyzer
from triton_release.models.repository import Repository

FAKE = """\
import json, os, sys
args = sys.argv[1:]
version, out = args[args.index("-x") + 1], args[args.index("-f") + 1]
with open(os.environ["FAKE_CALLS"], "a") as calls:
    calls.write(json.dumps({"version": version, "windows": args[args.index("--max-trials") + 1],
                            "interval": args[args.index("--measurement-interval") + 1]}) + "\\n")
if int(args[args.index("--measurement-interval") + 1]) < int(os.environ.get("FAKE_MIN_INTERVAL", "0")):
    print(os.environ["FAKE_SHORT_SAYS"], file=sys.stderr)
    sys.exit(1)
figures = json.loads(os.environ["FAKE_P50"])[version]
seen = sum(1 for line in open(os.environ["FAKE_CALLS"]) if json.loads(line)["version"] == version)
p50 = figures[(seen - 1) % len(figures)]
with open(out, "w") as f:
    f.write(f"Concurrency,Inferences/Second,p50 latency,p90 latency,p99 latency\\n1,{1e6 / p50},{p50},{p50},{p50}\\n")
"""


class FakeServer:
    http_url = grpc_url = "127.0.0.1:1"
    overrides: dict = {}
    completed: dict = {}

    def model_ready(self, name, version) -> bool:
        return True

    def check_running(self, during) -> None:
        pass

    def load_config(self, name, config, versions) -> str:
        return ""

    def logs(self) -> str:
        return ""


TOO_SHORT = "No valid requests recorded within time interval. Please use a larger time window."
STALLED = "Failed to obtain stable measurement within 3 measurement windows for concurrency 1. Please try to increase the --measurement-interval."


def measured(
    tmp_path,
    p50: dict[str, list[float]],
    bound: float | None = 0.1,
    rounds: int = 4,
    min_interval: int = 0,
    short_says: str = TOO_SHORT,
):
    """The model `a` measured by the meter against the figures (version -> p50 of its successive
    runs, warm-up first); the result and perf_analyzer's calls."""
    files = python_model_files("a")
    files["a/2/model.py"] = files["a/1/model.py"]
    repo = Repository.load(write_tree(tmp_path / "model_repository", files))
    script = tmp_path / "perf_analyzer"
    script.write_text(f"#!{sys.executable}\n{FAKE}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    calls = tmp_path / "calls.jsonl"
    env = {"PATH": "/usr/bin:/bin", "FAKE_P50": json.dumps(p50), "FAKE_CALLS": str(calls)}
    env["FAKE_MIN_INTERVAL"], env["FAKE_SHORT_SAYS"] = str(min_interval), short_says
    options = LatencyOptions(max_increase=bound, rounds=rounds, interval_ms=50)
    with LatencyMeter(repo, FakeServer(), {"a": 1}, {"a": 2}, options, PerfAnalyzer(script, "2.51.0", env)) as meter:
        found = meter.measure("a")
    return found, [json.loads(line) for line in calls.read_text().splitlines()]


# -- the statistics ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "df", "expected"),
    [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.99, 3, 4.541), (0.9875, 1, 25.452), (0.975, 30, 2.042)],
)
def test_students_t_quantiles_match_the_tables(p, df, expected):
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=2e-3)


def test_the_early_looks_share_one_tails_error_so_the_total_stays_at_five_percent():
    for pairs in (3, 4, 6, 20):
        looks = pairs - stats.MIN_PAIRS
        per_tail = (1 - stats.early_confidence(pairs)) / 2
        assert looks * per_tail + (1 - stats.CONFIDENCE) / 2 == pytest.approx(0.05)
    assert stats.early_confidence(4) == pytest.approx(0.975)


def test_the_early_interval_holds_the_final_one_and_widens_with_few_pairs():
    before, after = [5700.0, 5712.0], [5705.0, 5690.0]
    final, early = stats.ratio(before, after), stats.early(before, after, stats.early_confidence(4))
    assert early.low <= final.low and early.high >= final.high and early.estimate == final.estimate
    # two pairs a bootstrap only spans; Student's t widens it many times over
    assert early.high - early.low > 10 * (final.high - final.low)
    assert stats.early([5700.0], [5705.0], 0.975).high == float("inf")  # one pair decides nothing


# -- the meter ----------------------------------------------------------------------------------------

QUIET_AA = {"1": [5700, 5710, 5690, 5705, 5700], "2": [5700, 5705, 5695, 5710, 5702]}


def test_identical_versions_pass_after_the_minimum_of_pairs_and_stop_there(tmp_path):
    found, calls = measured(tmp_path, QUIET_AA)
    counted = [r for r in found.rounds if r.index > 0]
    assert len(counted) == 2 * stats.MIN_PAIRS and found.verdict == stats.PASS
    [compared] = found.comparisons
    assert compared.pairs == stats.MIN_PAIRS and compared.early is not None
    assert compared.to_json()["early_stop"]["pairs"] == stats.MIN_PAIRS


def test_a_clear_slowdown_is_refused_early_and_the_verdict_is_the_95_percent_intervals(tmp_path):
    found, _ = measured(tmp_path, {"1": QUIET_AA["1"], "2": [v * 1.2 for v in QUIET_AA["2"]]})
    [compared] = found.comparisons
    assert found.verdict == stats.REFUSED and compared.pairs < 4
    assert compared.p50.low > 1.1 and stats.verdict(compared.p50, 0.1) == stats.REFUSED


def test_noisy_rounds_near_the_bound_run_to_the_maximum_and_stay_inconclusive_never_pass(tmp_path):
    noisy = {"1": [5000, 5000, 5000, 5000, 5000], "2": [5000, 5800, 5300, 5700, 5400]}
    found, _ = measured(tmp_path, noisy)
    [compared] = found.comparisons
    assert compared.pairs == 4 and compared.early is None
    assert found.verdict == stats.INCONCLUSIVE


def test_without_a_bound_nothing_is_decided_and_every_pair_runs(tmp_path):
    found, _ = measured(tmp_path, QUIET_AA, bound=None)
    assert len([r for r in found.rounds if r.index > 0]) == 8 and found.verdict == stats.MEASURED


def test_a_warm_up_is_three_short_windows_and_a_counted_round_three_of_the_interval(tmp_path):
    from triton_release.models.latency.meter import WARMUP_MS, WINDOWS

    found, calls = measured(tmp_path, QUIET_AA)
    warmups, counted = calls[:2], calls[2:]
    assert [c["version"] for c in warmups] == ["1", "2"]
    assert all(c["windows"] == str(WINDOWS) == "3" and c["interval"] == str(WARMUP_MS) for c in warmups)
    # three windows (perf_analyzer gives no figures for fewer), each long enough for 10 requests of the
    # warm-ups' 5.7 ms: 57 ms, beyond the 50 asked for
    assert all(c["windows"] == "3" and c["interval"] == "57" for c in counted)
    assert [c["version"] for c in counted] == ["1", "2", "2", "1"]  # A B, B A
    assert [r.to_json()["windows"] for r in found.rounds] == [WINDOWS] * 6


@pytest.mark.parametrize("says", [TOO_SHORT, STALLED], ids=["no request finished", "windows too far apart"])
def test_a_window_no_request_finished_in_is_tried_again_twice_as_long_never_left_out(tmp_path, says):
    found, calls = measured(tmp_path, QUIET_AA, min_interval=150, short_says=says)  # a runner stalling over 100 ms
    assert found.verdict == stats.PASS and not found.note
    assert [c["interval"] for c in calls[:3]] == ["50", "100", "200"]  # the warm-up, twice doubled
    # each round records the window it used: the warm-ups 200, the counted rounds 57 (10 requests of
    # 5.7 ms) twice doubled
    assert [r.interval_ms for r in found.rounds] == [200, 200] + [228] * (len(found.rounds) - 2)
