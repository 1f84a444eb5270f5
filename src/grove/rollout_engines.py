"""The rollout engines a run may generate with (``rollout.engine``), registered in ``ROLLOUT_ENGINES``.

An engine is a factory ``fn(model, tokenizer, rollout) -> RolloutEngine`` (:class:`grove.rollout.engine.RolloutEngine`:
``generate`` G completions per prompt with their log-probs), given the policy's generation model, its tokenizer and
the config's ``rollout`` section. The trainer, supervised fine-tuning's evaluation and ``grove eval`` build theirs
with :func:`build_rollout_engine`, so another engine (an inference server, say) is one registered factory and needs
no trainer edit.

* ``transformers``: batched decoding with transformers' KV cache (:mod:`grove.rollout.hf_engine`);
* ``static_cache``: the decoder run over a preallocated cache, its decode step captured as a CUDA graph on a GPU
  (:mod:`grove.rollout.static_engine`), for the Llama-family decoders :mod:`grove.rollout.decoder_spec` lists;
* ``auto`` (the default): ``static_cache`` on CUDA where it runs the model, else ``transformers`` (on CUDA with a
  one-line warning saying why).

Each engine's module (and transformers' generation code with it) is imported when a run builds the engine, so
filling the registries for ``grove config show`` imports none of it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from grove.config import ConfigError
from grove.config.sections import RolloutConfig
from grove.registry import ROLLOUT_ENGINES, Entry
from grove.rollout.decoder_spec import DecoderSpec, UnsupportedDecoder
from grove.rollout.engine import RolloutEngine

__all__ = ["build_rollout_engine", "engine_choice", "static_cache_engine", "transformers_engine"]

log = logging.getLogger(__name__)


@ROLLOUT_ENGINES.register(
    "transformers",
    summary="Batched decoding with transformers' KV cache in this process (CPU or GPU): the default on a CPU.",
)
def transformers_engine(model: nn.Module, tokenizer: Any, rollout: RolloutConfig) -> RolloutEngine:
    """:class:`grove.rollout.hf_engine.TransformersEngine` with the config's prefix reuse and exact top logits."""
    from grove.rollout.hf_engine import TransformersEngine

    return TransformersEngine(
        model, tokenizer, reuse_prefixes=rollout.prefix_reuse, exact_top_logits=rollout.exact_top_logits
    )


@ROLLOUT_ENGINES.register(
    "static_cache",
    summary="The decoder run by grove over a preallocated KV cache, its one-token step captured as a CUDA graph "
    "per batch size and replayed (Llama, Mistral, Qwen2, Qwen3); eager on a CPU.",
)
def static_cache_engine(model: nn.Module, tokenizer: Any, rollout: RolloutConfig) -> RolloutEngine:
    """:class:`grove.rollout.static_engine.StaticCacheEngine` over its own copy of ``model``'s weights, in bfloat16
    when ``rollout.bf16_weights`` is true (else the model's dtype)."""
    from grove.rollout.static_engine import StaticCacheEngine

    try:
        return StaticCacheEngine(
            model, tokenizer, reuse_prefixes=rollout.prefix_reuse, exact_top_logits=rollout.exact_top_logits,
            dtype=torch.bfloat16 if rollout.bf16_weights else None, cuda_graphs=rollout.cuda_graphs,
            cache_memory_fraction=rollout.cache_memory_fraction,
        )
    except UnsupportedDecoder as exc:
        raise ConfigError(
            f"rollout.engine: static_cache cannot run this model: {exc}; set rollout.engine: auto or transformers"
        ) from exc


@ROLLOUT_ENGINES.register(
    "auto",
    summary="static_cache on CUDA for the decoders it runs, else transformers (saying why on CUDA): the default.",
)
def auto_engine(model: nn.Module, tokenizer: Any, rollout: RolloutConfig) -> RolloutEngine:
    """The engine :func:`engine_choice` picks for ``model``."""
    name, why = engine_choice("auto", model)
    if why is not None:
        log.warning("warning: %s", why)
    return ROLLOUT_ENGINES.get(name)(model, tokenizer, rollout)


def engine_choice(engine: str, model: nn.Module, device: torch.device | None = None) -> tuple[str, str | None]:
    """The engine id ``rollout.engine`` (``engine``) resolves to for ``model`` on ``device`` (default: where its
    weights are), and, when ``auto`` falls back to ``transformers`` on CUDA, the line saying why."""
    if engine != "auto":
        return engine, None
    device = device or next(model.parameters()).device
    if device.type != "cuda":
        return "transformers", None
    try:
        DecoderSpec.of(model)
    except UnsupportedDecoder as exc:
        return "transformers", f"rollout.engine auto: generating with the transformers engine: the static-cache " \
            f"engine cannot run this model ({exc})"
    return "static_cache", None


def build_rollout_engine(
    rollout: RolloutConfig, model: nn.Module, tokenizer: Any, entry: Entry | None = None
) -> RolloutEngine:
    """The engine ``rollout.engine`` names, for ``model`` and ``tokenizer``; ``entry``: its registry entry, where the
    front door looked it up (:class:`grove.resolve.RunPlan`)."""
    builder = entry.fn if entry is not None else ROLLOUT_ENGINES.get(rollout.engine)
    return builder(model, tokenizer, rollout)
