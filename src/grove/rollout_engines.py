"""The rollout engines a run may generate with (``rollout.engine``), registered in ``ROLLOUT_ENGINES``.

An engine is a factory ``fn(model, tokenizer, rollout) -> RolloutEngine`` (:class:`grove.rollout.engine.RolloutEngine`:
``generate`` G completions per prompt with their log-probs), given the policy's generation model, its tokenizer and
the config's ``rollout`` section. The trainer, supervised fine-tuning's evaluation and ``grove eval`` build theirs
with :func:`build_rollout_engine`, so another engine (a graph-captured decode on a GPU, an inference server) is one
registered factory and needs no trainer edit.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from grove.config.sections import RolloutConfig
from grove.registry import ROLLOUT_ENGINES
from grove.rollout.engine import RolloutEngine
from grove.rollout.hf_engine import TransformersEngine

__all__ = ["build_rollout_engine", "transformers_engine"]


@ROLLOUT_ENGINES.register(
    "transformers",
    summary="Batched decoding with transformers' KV cache in this process (CPU or GPU): the default.",
)
def transformers_engine(model: nn.Module, tokenizer: Any, rollout: RolloutConfig) -> RolloutEngine:
    """:class:`grove.rollout.hf_engine.TransformersEngine` with the config's prefix reuse and exact top logits."""
    return TransformersEngine(
        model, tokenizer, reuse_prefixes=rollout.prefix_reuse, exact_top_logits=rollout.exact_top_logits
    )


def build_rollout_engine(rollout: RolloutConfig, model: nn.Module, tokenizer: Any) -> RolloutEngine:
    """The engine ``rollout.engine`` names, for ``model`` and ``tokenizer``."""
    return ROLLOUT_ENGINES.get(rollout.engine)(model, tokenizer, rollout)
