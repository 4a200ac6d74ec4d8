"""Whether the next wave may load beside the current wave's cases: the container's memory and
process figures against its limits (no Docker: the daemon's figures given)."""

from __future__ import annotations

from triton_release.server.memory import PEAKS_IN_LIMIT, PIDS_SHARE, ContainerMemory, room_beside

MIB = 1024 * 1024


def test_the_peak_four_times_over_must_fit_the_memory_limit():
    assert PEAKS_IN_LIMIT == 4
    assert room_beside(100 * MIB, 400 * MIB, 10, 4096)
    assert not room_beside(100 * MIB + 1, 400 * MIB, 10, 4096)


def test_twice_the_processes_must_fit_three_quarters_of_the_pids_limit():
    assert PIDS_SHARE == 0.75
    assert room_beside(MIB, 1024 * MIB, 37, 100)  # 74 of 75
    assert not room_beside(MIB, 1024 * MIB, 38, 100)  # 76 of 75
    assert room_beside(MIB, 1024 * MIB, None, None)  # no pids limit: memory alone bounds


def test_a_figure_or_a_limit_not_known_is_no_room():
    assert not room_beside(None, 1024 * MIB, 10, 4096)  # the daemon gave no memory figure
    assert not room_beside(MIB, None, 10, 4096)  # no memory limit known
    assert not room_beside(MIB, 1024 * MIB, None, 4096)  # no process count under a pids limit


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
    assert server.room_for_next_wave() and server.reads == 1 and server.peak_memory == 200 * MIB
    server.stats = {"memory_stats": {"usage": 300 * MIB}, "pids_stats": {"current": 60}}
    assert not server.room_for_next_wave() and server.peak_memory == 300 * MIB  # 1200 MiB > 1024 MiB


def test_the_peak_so_far_decides_not_the_use_of_the_moment():
    server = Container({"memory_stats": {"usage": 300 * MIB}, "pids_stats": {"current": 10}}, 1024 * MIB, 4096)
    assert not server.room_for_next_wave()
    server.stats = {"memory_stats": {"usage": 100 * MIB}, "pids_stats": {"current": 10}}
    assert not server.room_for_next_wave() and server.peak_memory == 300 * MIB
    server.stats = None  # the daemon did not answer: no room, the peak kept
    fresh = Container(None, 1024 * MIB, 4096)
    assert not fresh.room_for_next_wave() and fresh.peak_memory is None
    assert not Container({"memory_stats": {"usage": MIB}}, 1024 * MIB, 4096).room_for_next_wave()  # no pids figure
