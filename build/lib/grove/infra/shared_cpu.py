"""Training on a CPU another process is using: torch's threads follow the cores the other processes leave free.

torch runs each operator on all its threads and waits at the end for the slowest. When another process keeps a core
busy, one of the threads keeps losing its core to it, and every operator waits for a scheduler time slice: on 2 cores
with one busy loop beside the run, a SmolLM2-135M step took 4.5 times as long on 2 threads as alone, and 1.6 times
on 1 thread (``benchmarks/shared_cpu.py``; docs/benchmarks.md, "Sharing the CPU"). OpenMP's passive wait policy does
not help enough and slows a run that is alone (1.5 times).

:class:`CoreShare` measures, over each step, how much CPU time the rest of the machine used (the system's busy time
from ``/proc/stat`` less this process's own), and before the next step sets torch's threads to the cores it left
free (at least one, at most the cores this process may run on). It applies where ``threads`` is ``null`` (follow
the machine) in a one-process run on a CPU; where ``threads`` is fixed it only says once, naming the cause and the
setting, that the steps are slowed. The thread count is logged per step as ``cpu_threads``; changing it changes
the order of floating-point sums, so such a run is not bit-for-bit repeatable (``threads: 1`` is).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import torch

__all__ = ["CoreShare", "busy_elsewhere", "usable_cores"]

log = logging.getLogger(__name__)

BUSY_SHARE = 0.5  # a core busy elsewhere for more than half the step counts as taken


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _system_busy_seconds() -> float | None:
    """The machine's CPU time spent busy since boot, in seconds (all cores), from ``/proc/stat``; ``None``
    where there is none."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    busy = sum(values[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is inside user)
    return busy / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    times = os.times()
    return times.user + times.system


def busy_elsewhere(system_busy: float, own: float, wall: float) -> float:
    """Cores other processes kept busy over ``wall`` seconds, from the machine's busy CPU seconds and this
    process's own over that time."""
    return max(0.0, system_busy - own) / wall if wall > 0 else 0.0


class CoreShare:
    """Between steps: ``before_step(step)`` (see the module docstring); ``threads`` is the count in use.

    ``follow``: set the threads (``threads: null``, one process on a CPU); otherwise only warn once. ``watch``
    false (a run on a GPU): nothing is measured."""

    def __init__(self, follow: bool, watch: bool = True) -> None:
        self.cores = usable_cores()
        self.follow = follow and watch
        self.watch = watch
        self.threads = self.most = torch.get_num_threads()  # never more than the run started with
        self._mark: tuple[float, float, float] | None = None
        self._warned = False

    def _snapshot(self) -> tuple[float, float, float] | None:
        if not self.watch:
            return None
        busy = _system_busy_seconds()
        return None if busy is None else (busy, _own_seconds(), time.monotonic())

    def before_step(self, step: int) -> int:
        """Measure the last step's share of the CPU taken elsewhere and set the threads for the next one; the
        thread count it runs on."""
        now = self._snapshot()
        last, self._mark = self._mark, now
        if now is None or last is None:
            return self.threads
        elsewhere = busy_elsewhere(now[0] - last[0], now[1] - last[1], now[2] - last[2])
        taken = int(elsewhere + (1 - BUSY_SHARE))  # cores busy elsewhere for more than half the step
        free = max(1, self.cores - taken)
        if self.follow:
            wanted = min(free, self.most)
            if wanted != self.threads:
                if wanted < self.threads and not self._warned:
                    self._warned = True
                    log.warning(
                        "warning: other processes kept about %.1f of the %d cores busy during step %d: running on %d "
                        "thread(s) while they do (threads: null follows the free cores; threads: N fixes the count)",
                        elsewhere, self.cores, step - 1, wanted,
                    )
                torch.set_num_threads(wanted)
                self.threads = wanted
        elif taken and self.threads > free and not self._warned:
            self._warned = True
            log.warning(
                "warning: other processes kept about %.1f of the %d cores busy during step %d while this run uses %d "
                "threads: each operator waits for a thread that lost its core, and steps can be several times slower; "
                "set threads: null to follow the free cores (or threads: %d), or free the cores",
                elsewhere, self.cores, step - 1, self.threads, free,
            )
        return self.threads
