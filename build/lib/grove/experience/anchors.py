"""Anchor groups: the steps of one env group that acted from the same environment state.

GiGPO ("Group-in-Group Policy Optimization for LLM Agent Training") pools, after the fact, the actions
taken from the same state in different trajectories of a group (and, since the key carries no turn
number, revisits of a state within one trajectory). The keys are arbitrary hashables, so the grouping is
a dictionary pass over the steps (O(S)); everything after it is tensor work on the dense ids.

With ``similarity`` set, states whose observation texts are at least that similar (``difflib`` ratio) are
pooled too: greedy clustering within each group, each state joining the first cluster whose
representative text is similar enough (verl-agent's ``enable_similarity``; O(n²) per group).
"""

from __future__ import annotations

import difflib
from collections.abc import Hashable, Sequence

__all__ = ["anchor_ids"]


def anchor_ids(
    groups: Sequence[int], keys: Sequence[Hashable], texts: Sequence[str], similarity: float | None = None
) -> list[int]:
    """Dense anchor-group id per step (ids numbered in order of first appearance)."""
    ids: dict[tuple[int, Hashable], int] = {}
    out = []
    if similarity is None:
        for g, key in zip(groups, keys, strict=True):
            out.append(ids.setdefault((g, key), len(ids)))
        return out
    representatives: dict[int, list[tuple[str, int]]] = {}
    next_id = 0
    for g, key, text in zip(groups, keys, texts, strict=True):
        exact = ids.get((g, key))
        if exact is None:
            for rep_text, rep_id in representatives.setdefault(g, []):
                if difflib.SequenceMatcher(None, rep_text, text).ratio() >= similarity:
                    exact = rep_id
                    break
            if exact is None:
                exact, next_id = next_id, next_id + 1
                representatives[g].append((text, exact))
            ids[(g, key)] = exact
        out.append(exact)
    return out
