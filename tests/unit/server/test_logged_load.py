"""The seconds a tritonserver's log shows its models' load took (server/readiness.py's
logged_load_seconds): from its first "loading:" line to its last "successfully loaded" one, by
the daemon's timestamps (`docker logs --timestamps`); none without both."""

from __future__ import annotations

from triton_release.server.readiness import logged_load_seconds

LOG = """\
2026-12-03T08:51:16.100000000Z I1203 08:51:16.099 1 pinned_memory_manager.cc:277] "Pinned memory pool is created"
2026-12-03T08:51:16.250000000Z I1203 08:51:16.249 1 model_lifecycle.cc:472] "loading: a:1"
2026-12-03T08:51:16.260000000Z I1203 08:51:16.259 1 model_lifecycle.cc:472] "loading: b:2"
2026-12-03T08:51:17.500000000Z I1203 08:51:17.499 1 model_lifecycle.cc:838] "successfully loaded 'a'"
2026-12-03T08:51:18.000000000Z I1203 08:51:17.999 1 model_lifecycle.cc:838] "successfully loaded 'b'"
2026-12-03T08:51:18.100000000Z I1203 08:51:18.099 1 grpc_server.cc:2519] "Started GRPCInferenceService at 0.0.0.0:8001"
"""


def test_the_load_is_the_span_from_the_first_loading_line_to_the_last_loaded_one():
    assert abs(logged_load_seconds(LOG) - 1.75) < 1e-6


def test_a_log_without_a_load_or_without_timestamps_shows_none():
    assert logged_load_seconds("") is None
    assert logged_load_seconds(LOG.split("\n", 3)[0]) is None  # no load yet
    unstamped = "\n".join(line.split(" ", 1)[1] for line in LOG.splitlines())
    assert logged_load_seconds(unstamped) is None


def test_seconds_without_a_fraction_are_read_too():
    log = '2026-12-03T08:51:16Z "loading: a:1"\n2026-12-03T08:51:19Z "successfully loaded \'a\'"\n'
    assert logged_load_seconds(log) == 3.0
