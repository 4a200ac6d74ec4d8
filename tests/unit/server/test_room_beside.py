"""How many of the next wave's models may load beside the current wave's cases: the container's
memory and process figures against its limits (no Docker: the daemon's figures given)."""

from __future__ import annotations

from triton_release.server.memory import PEAKS_IN_LIMIT, PIDS_SHARE, ContainerMemory, room_beside

MIB = 1024 * 1024


def test_the_peak_four_times_over_must_fit_the_memory_limit():
    assert PEAKS_IN_LIMIT == 4
    assert room_beside(100 * MIB, 400 * MIB, 10, 4096, loaded=2, wanted=2) == 2
    assert room_beside(100 * MIB + 1, 400 * MIB, 10, 4096, loaded=2, wanted=2) == 0


def test_the_models_beside_keep_the_processes_within_three_quarters_of_the_pids_limit():
    assert PIDS_SHARE == 0.75
    # 50 models run 2000 processes and threads, 40 each: 3072 of 4096 leaves room for 26 more
    assert room_beside(MIB, 1024 * MIB, 2000, 4096, loaded=50, wanted=50) == 26
    assert room_beside(MIB, 1024 * MIB, 2000, 4096, loaded=50, wanted=10) == 10  # a smaller wave: all of it
    assert room_beside(MIB, 1024 * MIB, 37, 100, loaded=1, wanted=1) == 1  # 74 of 75
    assert room_beside(MIB, 1024 * MIB, 38, 100, loaded=1, wanted=1) == 0  # 76 of 75
    assert room_beside(MIB, 1024 * MIB, 80, 100, loaded=1, wanted=1) == 0  # already past 3/4
    assert room_beside(MIB, 1024 * MIB, None, None, loaded=50, wanted=50) == 50  # no pids limit: memory alone


def test_a_figure_or_a_limit_not_known_is_no_room():
    assert room_beside(None, 1024 * MIB, 10, 4096, loaded=2, wanted=2) == 0  # the daemon gave no memory figure
    assert room_beside(MIB, None, 10, 4096, loaded=2, wanted=2) == 0  # no memory limit known
    assert room_beside(MIB, 1024 * MIB, None, 4096, loaded=2, wanted=2) == 0  # no process count under a limit
    assert room_beside(MIB, 1024 * MIB, 10, 4096, loaded=0, wanted=2) == 0  # no model to count from


class Container(ContainerMemory):
    """The daemon's answers, given: `stats`, one read each time."""

    def __init__(self, stats: dict | None, memory: int | None, pids: int | None) -> None:
        self.stats, self.memory, self.pids = stats, memory, pids
        self.peak_memory, self._cgroup_peak, self.reads = None, False, 0

    def _stats(self) -> dict | None:
        self.reads += 1
        return self.stats


def test_one_read_of_the_daemon_s_figures_decides_and_counts_as_a_memory_sample():
    server = Container({"memory_stats": {"usage": 200 * MIB}, "pids_stats": {"current": 60}}, 1024 * MIB, 4096)
    assert server.room_for_next_wave(2, 2) == 2 and server.reads == 1 and server.peak_memory == 200 * MIB
    server.stats = {"memory_stats": {"usage": 300 * MIB}, "pids_stats": {"current": 60}}
    assert server.room_for_next_wave(2, 2) == 0 and server.peak_memory == 300 * MIB  # 1200 MiB > 1024 MiB


def test_the_peak_so_far_decides_not_the_use_of_the_moment():
    server = Container({"memory_stats": {"usage": 300 * MIB}, "pids_stats": {"current": 10}}, 1024 * MIB, 4096)
    assert server.room_for_next_wave(2, 2) == 0
    server.stats = {"memory_stats": {"usage": 100 * MIB}, "pids_stats": {"current": 10}}
    assert server.room_for_next_wave(2, 2) == 0 and server.peak_memory == 300 * MIB
    fresh = Container(None, 1024 * MIB, 4096)  # the daemon did not answer: no room
    assert fresh.room_for_next_wave(2, 2) == 0 and fresh.peak_memory is None
    assert Container({"memory_stats": {"usage": MIB}}, 1024 * MIB, 4096).room_for_next_wave(2, 2) == 0  # no pids
