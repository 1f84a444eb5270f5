"""User reward functions for tests/test_rewards.py (loaded by import path ``user_rewards:...``)."""

from __future__ import annotations

NOT_CALLABLE = 42


def char_count(prompts, completions, **kwargs):
    """Reward = number of characters in the completion."""
    return [float(len(c)) for c in completions]


def only_tagged(prompts, completions, tag=None, **kwargs):
    """1.0 where the ``tag`` column is 'yes', None (does not apply) elsewhere."""
    return [1.0 if t == "yes" else None for t in tag]


def explodes_on_bad(prompts, completions, **kwargs):
    """Raises on any completion containing 'BAD'."""
    out = []
    for c in completions:
        if "BAD" in c:
            raise ZeroDivisionError("boom on a bad completion")
        out.append(1.0)
    return out


def batch_only_failure(prompts, completions, **kwargs):
    """Fails only when called on more than one sample."""
    if len(completions) > 1:
        raise RuntimeError("batch too large")
    return [0.0]


def wrong_length(prompts, completions, **kwargs):
    return [1.0]


def returns_string(prompts, completions, **kwargs):
    return ["1.0" for _ in completions]


def returns_nan(prompts, completions, **kwargs):
    return [float("nan") for _ in completions]


def returns_generator(prompts, completions, **kwargs):
    return (1.0 for _ in completions)


def two_checks(prompts, completions, **kwargs):
    """Two objectives from one call, as dicts: ``has_seven`` and ``short`` (None for empty completions)."""
    return [
        {"has_seven": float("7" in c), "short": (None if not c else float(len(c) <= 2))} for c in completions
    ]


two_checks.objectives = ("has_seven", "short")


def rows_of_three(prompts, completions, **kwargs):
    """Three objectives as an [n, 3] nested list, in declared order; no ``objectives`` attribute."""
    return [[1.0, float(len(c)), None] for c in completions]


def unknown_key(prompts, completions, **kwargs):
    return [{"has_seven": 1.0, "surprise": 0.0} for _ in completions]


unknown_key.objectives = ("has_seven",)
