"""How busy the machine is with work other than the benchmark's. Other work distorts every
figure: a parallel op whose second thread waits for a busy core slows down tenfold or more. The
meter compares the CPU time all processes used (``/proc/stat``, hypervisor steal included) with
the CPU time of this process and its finished children."""

from __future__ import annotations

import os
import resource
import time

#: Above this fraction of all CPUs used by others, a measurement is flagged as unreliable.
BUSY_THRESHOLD = 0.1


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
