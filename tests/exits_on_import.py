"""A user module that ends the process while it is imported (for tests/test_startup_checks.py)."""

import sys

sys.exit(0)


def reward(prompts, completions, **kwargs):  # pragma: no cover - never reached
    return [0.0 for _ in completions]
