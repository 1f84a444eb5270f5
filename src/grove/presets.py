"""Algorithm presets: ``algorithm: {preset: dapo}`` expands to the bundle of settings a paper uses.

A preset is a fragment of the config. It is merged *under* what the user wrote: every key the user
sets (in the YAML or with ``--set``) wins. A component block whose ``id`` the user changes is
taken whole from the user (the preset's parameters for another component would not apply).
``grove config show`` prints the expansion. Choices where a paper leaves a setting open are noted
next to each preset and in ``docs/algorithms.md``.
"""

from __future__ import annotations

import copy
from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # DeepSeekMath (Shao et al. 2024): group mean/std advantage, PPO clip 0.2, per-sequence token
    # mean, k3 KL in the loss with β = 0.04.
    "grpo": {
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.2},
            "aggregation": "seq_mean_token_mean",
            "kl": {"estimator": "k3", "coef": 0.04, "placement": "loss"},
        }
    },
    # "Understanding R1-Zero-Like Training" (Liu et al. 2025): no std, constant length normaliser, no KL.
    "dr_grpo": {
        "algorithm": {
            "advantage": {"id": "dr_grpo"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.2},
            "aggregation": "seq_mean_token_sum_norm",
            "kl": {"coef": 0.0},
        }
    },
    # DAPO (Yu et al. 2025): clip-higher (0.2 / 0.28), token-level loss, no KL, dynamic sampling,
    # soft overlong punishment (their L_cache = 20% of L_max).
    "dapo": {
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.28},
            "aggregation": "token_mean",
            "kl": {"coef": 0.0},
            "dynamic_sampling": {"enabled": True, "max_rounds": 3},
            "overlong": {"soft_penalty": True},
        }
    },
    # RLOO (Ahmadian et al. 2024): leave-one-out baseline; KL to the reference in the reward (k1, β 0.05).
    "rloo": {
        "algorithm": {
            "advantage": {"id": "rloo"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.2},
            "aggregation": "token_mean",
            "kl": {"estimator": "k1", "coef": 0.05, "placement": "reward"},
        }
    },
    # GSPO (Zheng et al. 2025): sequence-level, length-normalised ratio with the paper's tiny clip
    # range (3e-4 / 4e-4); verl forces seq_mean_token_mean for it; no KL.
    "gspo": {
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "gspo", "clip_low": 3.0e-4, "clip_high": 4.0e-4},
            "aggregation": "seq_mean_token_mean",
            "kl": {"coef": 0.0},
        }
    },
    # GMPO (Zhao et al. 2025): geometric mean of token ratios, clip range (0.4 in log space), no KL.
    "gmpo": {
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "gmpo", "clip_low": 0.4, "clip_high": 0.4},
            "aggregation": "seq_mean_token_mean",
            "kl": {"coef": 0.0},
        }
    },
    # CISPO (MiniMax-M1): clipped, stop-gradient IS weight; no lower clip, weight cap 1 + 4; token mean.
    "cispo": {
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "cispo", "clip_high": 4.0},
            "aggregation": "token_mean",
            "kl": {"coef": 0.0},
        }
    },
    # SAPO (Gao et al. 2025): soft gate instead of a hard clip (τ+ 1.0, τ- 1.05); sequence-mean aggregation.
    "sapo": {
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "sapo", "tau_pos": 1.0, "tau_neg": 1.05},
            "aggregation": "seq_mean_token_mean",
            "kl": {"coef": 0.0},
        }
    },
    # GPG (Chu et al. 2025): group-mean baseline with the valid-sample scaling, plain policy gradient
    # (no ratio, no clip), token mean, no KL. On-policy only: one epoch, one mini-batch.
    "gpg": {
        "train": {"ppo_epochs": 1, "mini_batches": 1},
        "algorithm": {
            "advantage": {"id": "gpg"},
            "policy_loss": {"id": "reinforce"},
            "aggregation": "token_mean",
            "kl": {"coef": 0.0},
        },
    },
    # REINFORCE++ (Hu 2025): batch-whitened returns, PPO clip 0.2, token mean, k2-style KL in the loss
    # (the paper's later versions; β 0.01 here as a conservative default — set kl.coef to taste).
    "reinforce_pp": {
        "algorithm": {
            "advantage": {"id": "reinforce_pp"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.2},
            "aggregation": "token_mean",
            "kl": {"estimator": "k2", "coef": 0.01, "placement": "loss"},
        }
    },
    # ReMax (Li et al. 2023): greedy-rollout baseline (one extra greedy completion per prompt), PPO clip.
    "remax": {
        "algorithm": {
            "advantage": {"id": "remax"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.2},
            "aggregation": "token_mean",
            "kl": {"coef": 0.0},
        }
    },
    # "It Takes Two: Your GRPO Is Secretly DPO": GRPO with the minimal group of two rollouts.
    "two_grpo": {
        "train": {"completions_per_prompt": 2},
        "algorithm": {
            "advantage": {"id": "grpo"},
            "policy_loss": {"id": "ppo_clip", "clip_low": 0.2, "clip_high": 0.2},
            "aggregation": "token_mean",
        },
    },
}

# D^3S ("Learning More with Less: A Dynamic Dual-Level Down-Sampling Framework for Efficient Policy
# Optimization"): GRPO plus both down-sampling levels on a relaxing schedule. The abstract gives no
# sizes or schedule; our defaults (docs/algorithms-selection.md): keep the max-Var(A) half of every
# group and the top-|A|·H half of every completion's tokens at the start, relaxed along a cosine to
# everything by the last step. Compose with another preset by writing `selection:` next to it.
PRESETS["d3s"] = {
    "algorithm": copy.deepcopy(PRESETS["grpo"]["algorithm"]),
    "selection": {
        "samples": {"ratio": {"kind": "cosine", "start": 0.5, "end": 1.0}, "scope": "group", "advantages": "keep"},
        "tokens": {"ratio": {"kind": "cosine", "start": 0.5, "end": 1.0}, "scope": "sequence"},
    },
}


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
    return merge_under(PRESETS[name], data)
