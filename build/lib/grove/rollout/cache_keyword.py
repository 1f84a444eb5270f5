"""The keyword a transformers model takes its key/value cache under.

transformers 5 renames the forward's ``past_key_values`` argument to ``cache`` (the old name still works, with a
``FutureWarning``, until its removal); grove passes the cache under whichever name the installed model's forward
declares, so it runs warning-free on the current API and still on a version from before the rename.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["cache_argument"]


@functools.cache
def _keyword_of(forward_owner: type) -> str:
    parameters = inspect.signature(forward_owner.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """``{keyword: cache}`` for ``model``'s forward (a peft model is asked through the model it wraps)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {_keyword_of(type(base)): cache}
