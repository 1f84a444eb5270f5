"""The columns of the reward matrix a ``rewards:`` block fills (one per objective)."""

from __future__ import annotations

__all__ = ["reward_column_names"]


def reward_column_names(reward) -> tuple[str, ...]:
    """The reward-matrix columns a ``rewards:`` block fills: its declared ``objectives``, a registered reward's
    ``objective_names()``, a user function's ``objectives`` attribute, else its display name."""
    from grove.registry import REWARD_FUNCTIONS, ScoresSeveralObjectives, import_callable

    if reward.objectives:
        return tuple(reward.objectives)
    if ":" in reward.id:
        try:
            own = getattr(import_callable(reward.id, "reward"), "objectives", None)
        except Exception:  # noqa: BLE001 - reported when the reward is resolved for the run
            own = None
    else:
        params = reward.validated(REWARD_FUNCTIONS)
        several = REWARD_FUNCTIONS.entry(reward.id).declares(ScoresSeveralObjectives)
        own = params.objective_names() if several else None
    return tuple(own) if own else (reward.display_name,)
