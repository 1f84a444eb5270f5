"""User code that ends or stalls the run, for tests/test_user_code_exits.py (loaded by import path).

* ``exits_at_second_step``: a user advantage estimator (registered through the config's ``imports:``) that calls
  ``sys.exit(0)`` from its second call on: user code outside rewards and environment steps.
* ``hangs_from_call``: a reward that hangs (sleeps) from its ``GROVE_TEST_HANG_FROM`` -th call on (default 2).
* ``interrupts``: a reward that raises ``KeyboardInterrupt``.
"""

from __future__ import annotations

import os
import sys
import time

from grove.core.advantages.group_norm import GRPOParams, grpo
from grove.registry import ADVANTAGE_ESTIMATORS

_calls = {"estimator": 0, "reward": 0}


@ADVANTAGE_ESTIMATORS.register("exits_at_second_step", params=GRPOParams, summary="GRPO, then sys.exit(0).")
def exits_at_second_step(batch, scores, params):
    _calls["estimator"] += 1
    if _calls["estimator"] >= 2:
        sys.exit(0)
    return grpo(batch, scores, params)


def hangs_from_call(prompts, completions, **kwargs):
    _calls["reward"] += 1
    if _calls["reward"] >= int(os.environ.get("GROVE_TEST_HANG_FROM", "2")):
        time.sleep(600)
    return [float(len(c)) for c in completions]


def interrupts(prompts, completions, **kwargs):
    raise KeyboardInterrupt
