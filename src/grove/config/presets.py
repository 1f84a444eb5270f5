"""Algorithm presets: ``algorithm: {preset: dapo}`` expands to the bundle of settings a paper uses.

A preset is a fragment of the config. It is merged *under* what the user wrote: every key the user
sets (in the YAML or with ``--set``) wins. A component block whose ``id`` the user changes is
taken whole from the user (the preset's parameters for another component would not apply).
``grove config show`` prints the expansion; ``docs/algorithms.md`` lists every preset (generated from
:data:`PRESETS`). Choices where a paper leaves a setting open are noted in each preset's summary.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from grove.core import papers

__all__ = ["PRESETS", "Preset", "expand_preset", "merge_under"]


@dataclass(frozen=True)
class Preset:
    """A paper's bundle of settings: ``settings`` is a config fragment (``{"algorithm": {...}, ...}``)."""

    paper: str
    summary: str
    settings: dict[str, Any]


def _ppo_clip(high: float = 0.2) -> dict[str, Any]:
    return {"id": "ppo_clip", "clip_low": 0.2, "clip_high": high}


def _algorithm(advantage: str, policy_loss: dict[str, Any], aggregation: str, **rest: Any) -> dict[str, Any]:
    """An ``algorithm`` section; ``kl`` defaults to off."""
    return {
        "advantage": {"id": advantage},
        "policy_loss": policy_loss,
        "aggregation": aggregation,
        "kl": rest.pop("kl", {"coef": 0.0}),
        **rest,
    }


PRESETS: dict[str, Preset] = {
    "grpo": Preset(
        papers.GRPO,
        "grpo + ppo_clip 0.2 + seq_mean_token_mean + k3 KL β 0.04 in the loss",
        {"algorithm": _algorithm("grpo", _ppo_clip(), "seq_mean_token_mean",
                                 kl={"estimator": "k3", "coef": 0.04, "placement": "loss"})},
    ),
    "dr_grpo": Preset(
        papers.DR_GRPO,
        "dr_grpo + ppo_clip 0.2 + seq_mean_token_sum_norm (constant length normaliser), no KL",
        {"algorithm": _algorithm("dr_grpo", _ppo_clip(), "seq_mean_token_sum_norm")},
    ),
    "dapo": Preset(
        papers.DAPO,
        "grpo + clip-higher 0.2 / 0.28 + token_mean + dynamic sampling (3 rounds) + soft overlong punishment "
        "(cache 20% of the limit, their 4k of 20k), no KL",
        {"algorithm": _algorithm("grpo", _ppo_clip(0.28), "token_mean",
                                 dynamic_sampling={"enabled": True, "max_rounds": 3},
                                 overlong={"soft_penalty": True})},
    ),
    "rloo": Preset(
        papers.RLOO,
        "rloo (leave-one-out baseline) + ppo_clip 0.2 + token_mean + k1 KL β 0.05 in the reward",
        {"algorithm": _algorithm("rloo", _ppo_clip(), "token_mean",
                                 kl={"estimator": "k1", "coef": 0.05, "placement": "reward"})},
    ),
    "gspo": Preset(
        papers.GSPO,
        "grpo + gspo with the paper's sequence clip range 3e-4 / 4e-4 + seq_mean_token_mean (the paper's "
        "per-sequence mean), no KL",
        {"algorithm": _algorithm("grpo", {"id": "gspo", "clip_low": 3.0e-4, "clip_high": 4.0e-4},
                                 "seq_mean_token_mean")},
    ),
    "gmpo": Preset(
        papers.GMPO,
        "grpo + gmpo (clip range 0.4 in log space) + seq_mean_token_mean, no KL",
        {"algorithm": _algorithm("grpo", {"id": "gmpo", "clip_low": 0.4, "clip_high": 0.4}, "seq_mean_token_mean")},
    ),
    "cispo": Preset(
        papers.CISPO,
        "grpo + cispo (no lower bound, weight cap 1 + 4) + token_mean, no KL",
        {"algorithm": _algorithm("grpo", {"id": "cispo", "clip_high": 4.0}, "token_mean")},
    ),
    "sapo": Preset(
        papers.SAPO,
        "grpo + sapo (τ+ 1.0, τ- 1.05, a soft gate instead of the hard clip) + seq_mean_token_mean, no KL",
        {"algorithm": _algorithm("grpo", {"id": "sapo", "tau_pos": 1.0, "tau_neg": 1.05}, "seq_mean_token_mean")},
    ),
    "gpg": Preset(
        papers.GPG,
        "gpg + reinforce (plain policy gradient, no ratio) + token_mean, no KL; on-policy: one epoch, one mini-batch",
        {
            "train": {"ppo_epochs": 1, "mini_batches": 1},
            "algorithm": _algorithm("gpg", {"id": "reinforce"}, "token_mean"),
        },
    ),
    "reinforce_pp": Preset(
        papers.REINFORCE_PP,
        "reinforce_pp + ppo_clip 0.2 + token_mean + k2 KL in the loss (the paper's later versions; β 0.01 is our "
        "conservative default)",
        {"algorithm": _algorithm("reinforce_pp", _ppo_clip(), "token_mean",
                                 kl={"estimator": "k2", "coef": 0.01, "placement": "loss"})},
    ),
    "remax": Preset(
        papers.REMAX,
        "remax (one extra greedy completion per prompt as baseline) + ppo_clip 0.2 + token_mean, no KL",
        {"algorithm": _algorithm("remax", _ppo_clip(), "token_mean")},
    ),
    "two_grpo": Preset(
        papers.TWO_GRPO,
        "grpo with completions_per_prompt: 2 (with distinct rewards A = ±1/√2, unbiased std)",
        {
            "train": {"completions_per_prompt": 2},
            "algorithm": {"advantage": {"id": "grpo"}, "policy_loss": _ppo_clip(), "aggregation": "token_mean"},
        },
    ),
    # multi-objective: how several rewards become one advantage (docs/multi-objective.md)
    "gdpo": Preset(
        papers.GDPO,
        "normalize_then_sum (each reward z-scored in its group, weighted sum, batch renormalisation: TRL's "
        "conventions) + score_as_advantage + ppo_clip 0.2 + token_mean, no KL",
        {"algorithm": _algorithm("score_as_advantage", _ppo_clip(), "token_mean",
                                 reward_combination={"id": "normalize_then_sum", "renormalize": "batch"})},
    ),
    "gdpo_verl": Preset(
        papers.GDPO,
        "normalize_then_sum with verl's conventions (eps 1e-6, single-sample groups raw, whitening over tokens) + "
        "score_as_advantage + ppo_clip 0.2 + token_mean, no KL",
        {"algorithm": _algorithm("score_as_advantage", _ppo_clip(), "token_mean",
                                 reward_combination={"id": "normalize_then_sum", "eps": 1.0e-6, "lone_value": "raw",
                                                     "renormalize": "tokens"})},
    ),
    "mo_grpo": Preset(
        papers.MO_GRPO,
        "variance_weighted (each objective divided by its group std) + grpo + ppo_clip 0.2 + seq_mean_token_mean, "
        "no KL",
        {"algorithm": _algorithm("grpo", _ppo_clip(), "seq_mean_token_mean",
                                 reward_combination={"id": "variance_weighted", "scope": "group"})},
    ),
    "crpo": Preset(
        papers.CRPO,
        "several rule-based objectives (accuracy, faithfulness, comprehensiveness, format) combined by GDPO's "
        "normalize_then_sum (the abstract does not say how; our reading) + score_as_advantage + ppo_clip 0.2 + "
        "token_mean, no KL",
        {"algorithm": _algorithm("score_as_advantage", _ppo_clip(), "token_mean",
                                 reward_combination={"id": "normalize_then_sum", "renormalize": "batch"})},
    ),
}

# D^3S: GRPO plus both down-sampling levels on a relaxing schedule. The abstract gives no sizes or
# schedule; our defaults (docs/algorithms-selection.md): keep the max-Var(A) half of every group and
# the top-|A|·H half of every completion's tokens at the start, relaxed along a cosine to everything
# by the last step. Compose with another preset by writing `selection:` next to it.
PRESETS["d3s"] = Preset(
    papers.D3S,
    "the grpo preset + both D^3S levels, keep ratios cosine 0.5 → 1.0 over the run (sizes and schedule are our "
    "choice: the abstract gives none)",
    {
        "algorithm": copy.deepcopy(PRESETS["grpo"].settings["algorithm"]),
        "selection": {
            "samples": {"ratio": {"kind": "cosine", "start": 0.5, "end": 1.0}, "scope": "group", "advantages": "keep"},
            "tokens": {"ratio": {"kind": "cosine", "start": 0.5, "end": 1.0}, "scope": "sequence"},
        },
    },
)


def merge_under(preset: Any, user: Any) -> Any:
    """``preset`` overlaid with ``user`` (user wins; component blocks with a different id are replaced)."""
    if isinstance(preset, dict) and isinstance(user, dict):
        if "id" in preset and "id" in user and preset["id"] != user["id"]:
            return copy.deepcopy(user)
        merged = copy.deepcopy(preset)
        for key, value in user.items():
            merged[key] = merge_under(preset[key], value) if key in preset else copy.deepcopy(value)
        return merged
    return copy.deepcopy(user)


def expand_preset(data: dict[str, Any]) -> dict[str, Any]:
    """Expand ``algorithm.preset`` in raw config data; unknown names raise ``KeyError`` listing presets."""
    algorithm = data.get("algorithm")
    name = algorithm.get("preset") if isinstance(algorithm, dict) else None
    if name is None:
        return data
    if name not in PRESETS:
        raise KeyError(f"algorithm.preset: unknown preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return merge_under(PRESETS[name].settings, data)
