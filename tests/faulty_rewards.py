"""Misbehaving reward functions for tests/test_reward_isolation.py and tests/test_reward_faults.py (loaded by import
path ``faulty_rewards:...``).

Under ``isolation: process`` they run in a spawned worker, which imports this module by name: the tests put
``tests/`` on ``sys.path`` and on ``PYTHONPATH``. Completions carrying a marker word misbehave (or, for the rewards
that must misbehave on a real model's output, completions of even length); the others score their length.
"""

from __future__ import annotations

import ctypes
import os
import sys
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


def torch_loaded(prompts, completions, **kwargs):
    """1 where the process it runs in has imported torch, else 0."""
    return [float("torch" in sys.modules) for _ in completions]


def raises_on_even_length(prompts, completions, **kwargs):
    """Raises on a completion of even length (a reward broken on part of the inputs), 1.0 otherwise."""
    out = []
    for c in completions:
        if len(c) % 2 == 0:
            raise ValueError(f"cannot parse {c[:20]!r}")
        out.append(1.0)
    return out


# ----------------------------------------------------------------------------- user code ending the process
# Each misbehaves on a completion of even length (deterministic for a given completion, so the one-sample re-scoring
# after a failed batch finds the same samples) and scores 1.0 otherwise.


def _misbehaves(completions) -> bool:
    return any(len(c) % 2 == 0 for c in completions)


def exits_0(prompts, completions, **kwargs):
    """``sys.exit(0)`` on a completion of even length (a script's "done" left in a reward)."""
    if _misbehaves(completions):
        sys.exit(0)
    return [1.0 for _ in completions]


def exits_3(prompts, completions, **kwargs):
    """``sys.exit(3)`` on a completion of even length."""
    if _misbehaves(completions):
        sys.exit(3)
    return [1.0 for _ in completions]


def exits_with_message(prompts, completions, **kwargs):
    """``sys.exit("...")`` on a completion of even length (Python prints the message and exits 1)."""
    if _misbehaves(completions):
        sys.exit("reward gave up on an even completion")
    return [1.0 for _ in completions]


def raises_system_exit(prompts, completions, **kwargs):
    """``raise SystemExit`` on a completion of even length."""
    if _misbehaves(completions):
        raise SystemExit
    return [1.0 for _ in completions]


def raises_keyboard_interrupt(prompts, completions, **kwargs):
    """``raise KeyboardInterrupt`` on a completion of even length (not a Ctrl-C)."""
    if _misbehaves(completions):
        raise KeyboardInterrupt
    return [1.0 for _ in completions]


def os_exits_0(prompts, completions, **kwargs):
    """``os._exit(0)`` on a completion of even length: ends its process at once (only under isolation)."""
    if _misbehaves(completions):
        os._exit(0)
    return [1.0 for _ in completions]


# ----------------------------------------------------------------------------- values that cannot be scored


def none_on_even_length(prompts, completions, **kwargs):
    """None ("does not apply") for a completion of even length, its length otherwise."""
    return [None if len(c) % 2 == 0 else _length(c) for c in completions]


def none_checks_on_even_length(prompts, completions, **kwargs):
    """Two objectives, both None for a completion of even length; otherwise ``format``: the first character is
    above '2', ``short``: one character long."""
    return [
        {"format": None, "short": None} if len(c) % 2 == 0 else {"format": float(c[0] > "2"), "short": float(len(c) == 1)}
        for c in completions
    ]


none_checks_on_even_length.objectives = ("format", "short")


def always_none(prompts, completions, **kwargs):
    """None for every completion: the reward never applies."""
    return [None for _ in completions]


def huge_on_even_length(prompts, completions, **kwargs):
    """1e300 for a completion of even length (finite in float64, infinite in float32), its length otherwise."""
    return [1e300 if len(c) % 2 == 0 else _length(c) for c in completions]


def huge_int_on_even_length(prompts, completions, **kwargs):
    """``2**1024`` (a Python int no float can hold) for a completion of even length, its length otherwise."""
    return [2**1024 if len(c) % 2 == 0 else len(c) for c in completions]


def near_float32_max(prompts, completions, **kwargs):
    """3e38 for every completion: fits float32 (max ≈ 3.4e38), but not once weighted by more than about 1.13."""
    return [3e38 for _ in completions]
