"""Named points of a run where a test may kill the process, to prove that nothing is lost whenever it dies.

``GROVE_KILL_AT=point:step[,point:step ...]`` makes the process SIGKILL itself when it reaches ``point`` during
``step``. The points sit where a crash is most likely to corrupt state: ``generation`` (rollouts done, nothing
trained), ``update`` (weights changed, nothing logged), ``logging`` (the metrics line written, TensorBoard not
yet), ``checkpoint`` (the model written into the temporary directory, the trainer state not yet). Unset (always,
outside the kill fuzzer of ``tests/test_kill_fuzzer.py``) this is one environment lookup per point.
"""

from __future__ import annotations

import os
import signal

__all__ = ["reached"]


def reached(point: str, step: int) -> None:
    spec = os.environ.get("GROVE_KILL_AT")
    if spec and f"{point}:{step}" in spec.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
