"""Misbehaving reward functions for tests/test_reward_isolation.py (loaded by import path ``faulty_rewards:...``).

Under ``isolation: process`` they run in a spawned worker, which imports this module by name: the tests put
``tests/`` on ``sys.path`` and on ``PYTHONPATH``. Completions carrying a marker word misbehave; the others score
their length.
"""

from __future__ import annotations

import ctypes
import os
import time


def _length(c: str) -> float:
    return float(len(c))


def hangs(prompts, completions, **kwargs):
    """Sleeps for a minute on a batch containing 'HANG' (a reward stuck on an input)."""
    if any("HANG" in c for c in completions):
        time.sleep(60)
    return [_length(c) for c in completions]


def raises_on_bad(prompts, completions, **kwargs):
    """Raises on any completion containing 'BAD'."""
    out = []
    for c in completions:
        if "BAD" in c:
            raise ZeroDivisionError("boom on a bad completion")
        out.append(_length(c))
    return out


def segfaults(prompts, completions, **kwargs):
    """Dereferences NULL (SIGSEGV) on a completion containing 'CRASH'."""
    if any("CRASH" in c for c in completions):
        ctypes.string_at(0)
    return [_length(c) for c in completions]


def exits(prompts, completions, **kwargs):
    """Ends its process with ``os._exit(3)`` on a completion containing 'EXIT'."""
    if any("EXIT" in c for c in completions):
        os._exit(3)
    return [_length(c) for c in completions]


def nan_on_odd(prompts, completions, **kwargs):
    """NaN for a completion containing 'ODD' (a bug the scorer rejects), the length otherwise."""
    return [float("nan") if "ODD" in c else _length(c) for c in completions]


def pid(prompts, completions, **kwargs):
    """The process id it runs in (to see which process scored)."""
    return [float(os.getpid()) for _ in completions]


def raises_on_even_length(prompts, completions, **kwargs):
    """Raises on a completion of even length (a reward broken on part of the inputs), 1.0 otherwise."""
    out = []
    for c in completions:
        if len(c) % 2 == 0:
            raise ValueError(f"cannot parse {c[:20]!r}")
        out.append(1.0)
    return out
