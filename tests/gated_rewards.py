"""A reward that holds its run inside a step until the test lets it go: the file ``$GROVE_TEST_GATE`` existing.

While it waits it leaves ``$GROVE_TEST_GATE.waiting`` (holding its process id), so a test knows the run is past its
start-up and inside a step."""

from __future__ import annotations

import os
import time
from pathlib import Path


def waits_for_gate(prompts, completions, **kwargs):
    gate = Path(os.environ["GROVE_TEST_GATE"])
    if not gate.exists():
        Path(f"{gate}.waiting").write_text(str(os.getpid()))
        while not gate.exists():
            time.sleep(0.05)
    return [float(len(c)) for c in completions]


def slow(prompts, completions, **kwargs):
    """Sleeps ``$GROVE_TEST_SLEEP`` seconds (default 1) per call: a phase that prints nothing for a while."""
    time.sleep(float(os.environ.get("GROVE_TEST_SLEEP", "1")))
    return [float(len(c)) for c in completions]
