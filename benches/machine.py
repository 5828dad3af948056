"""How busy the machine is with work other than the benchmark's. Other work distorts every
figure: a parallel op whose second thread waits for a busy core slows down tenfold or more. The
meter compares the CPU time all processes used (``/proc/stat``, hypervisor steal included) with
the CPU time of this process and its finished children.

A virtual machine's CPUs may also run at different speeds with no other process in sight (a
sibling hyperthread busy with another guest's work): ``cpu_speeds`` measures each."""

from __future__ import annotations

import os
import resource
import time

#: Above this fraction of all CPUs used by others, a measurement is flagged as unreliable.
BUSY_THRESHOLD = 0.1

#: Below this ratio of the slowest CPU's FMA speed to the fastest's, the CPUs count as uneven.
UNEVEN_THRESHOLD = 0.85


def _all_busy_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _own_busy_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Meter:
    """Started at construction; ``others()`` is the fraction of all CPUs that other processes
    used since then (0..1)."""

    def __init__(self) -> None:
        self.start = (time.perf_counter(), _all_busy_s(), _own_busy_s())

    def others(self) -> float:
        wall0, all0, own0 = self.start
        wall = time.perf_counter() - wall0
        others = (_all_busy_s() - all0) - (_own_busy_s() - own0)
        return min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1)))) if wall > 0 else 0.0


def wait_until_quiet(max_wait_s: float, sample_s: float = 1.0) -> tuple[float, float]:
    """Waits (sampling while idle) until others use less than ``BUSY_THRESHOLD`` of the CPUs,
    at most ``max_wait_s`` seconds. Returns the seconds waited and the last sample."""
    start = time.perf_counter()
    while True:
        meter = Meter()
        time.sleep(sample_s)
        busy = meter.others()
        waited = time.perf_counter() - start
        if busy < BUSY_THRESHOLD or waited >= max_wait_s:
            return waited, busy


def cpu_speeds(seconds: float = 0.3) -> list[float]:
    """The f32 FMA peak in GFLOP/s of one thread pinned to each CPU this process may use, in
    CPU order (``fxmlir.fma_peak``). Two threads on uneven CPUs finish equal shares of work at
    different times: a two-thread figure then depends on how a backend shares out its work."""
    import fxmlir

    allowed = os.sched_getaffinity(0)
    speeds = []
    try:
        for cpu in sorted(allowed):
            os.sched_setaffinity(0, {cpu})
            speeds.append(fxmlir.fma_peak(threads=1, seconds=seconds))
    finally:
        os.sched_setaffinity(0, allowed)
    return speeds


def unevenness(speeds: list[float]) -> float:
    """The slowest CPU's speed over the fastest's (1.0 for even CPUs or no measurement)."""
    return min(speeds) / max(speeds) if speeds and max(speeds) > 0 else 1.0


def is_uneven(speeds: list[float]) -> bool:
    """Whether the slowest CPU ran below ``UNEVEN_THRESHOLD`` of the fastest."""
    return unevenness(speeds) < UNEVEN_THRESHOLD
