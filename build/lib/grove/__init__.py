"""grove: group-relative reinforcement learning (GRPO and its family) for language models.

From Python: ``grove.make_config``, ``grove.train``, ``grove.evaluate``, ``grove.load_run`` and ``grove.Run``
(:mod:`grove.api`), loaded on first use so that ``import grove`` and the command line start at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Run", "evaluate", "load_run", "make_config", "train"]

if TYPE_CHECKING:
    from grove.api import Run, evaluate, load_run, make_config, train


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("grove.api"), name)
    raise AttributeError(f"module 'grove' has no attribute {name!r}")
