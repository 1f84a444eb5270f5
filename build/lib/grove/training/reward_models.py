"""The models of a reward-model run: the sequence classifier (:mod:`grove.models.reward_model_network`) on the
backbone ``model.name`` / ``model.init_from`` names, optionally with ``model.lora`` adapters (its new score head
trained in full beside them), wrapped for the world's strategy (DDP / FSDP2) as the policy is
(:mod:`grove.training.policy_models`), and loaded from and written to checkpoints the same way. There is no
reference model and no generation copy: a reward model generates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from grove.config import ConfigError, GroveConfig
from grove.distributed.strategies import wrap_for_training
from grove.distributed.world import World
from grove.infra import checkpoint as ckpt
from grove.models.compiled_layers import CompileUnavailable, compile_decoder_layers
from grove.models.initial_weights import policy_source
from grove.models.lora import apply_lora
from grove.models.reward_model_network import SequenceScoreModule, load_sequence_classifier
from grove.training.policy_models import PolicyModels, _load_checkpoint_weights, set_activation_checkpointing

__all__ = ["build_reward_models"]


def build_reward_models(
    cfg: GroveConfig, world: World, resume_from: Path | None, heads: Sequence[str], info: dict[str, Any]
) -> PolicyModels:
    """The reward model with one output per head (``info``: its config's ``grove_reward_model`` entry), as
    :class:`PolicyModels` whose ``causal_lm`` is the classifier and ``train_module`` its wrapped
    :class:`SequenceScoreModule`."""
    source = policy_source(cfg.model.name, cfg.model.init_from)
    classifier, tokenizer = load_sequence_classifier(source, heads, info, dtype=getattr(torch, cfg.model.dtype))
    lora = cfg.model.lora is not None
    if lora:
        classifier = apply_lora(classifier, cfg.model.lora, base_name=source, task_type="SEQ_CLS")
    if resume_from is not None and not ckpt.is_sharded(resume_from):  # sharded: loaded once wrapped
        _load_checkpoint_weights(classifier, resume_from, lora, cfg.model.name)
    if cfg.train.activation_checkpointing:
        set_activation_checkpointing(classifier, True)
    classifier.to(world.device)
    if cfg.train.compile:
        if world.distributed:
            raise ConfigError("train.compile is not supported with several ranks yet; set train.compile: false")
        try:
            compile_decoder_layers(classifier, world.device)
        except CompileUnavailable as exc:
            raise ConfigError(str(exc)) from exc
    train_module, strategy = wrap_for_training(SequenceScoreModule(classifier), cfg.distributed.strategy, world)
    return PolicyModels(classifier, train_module, strategy, tokenizer, None, None, lora)
