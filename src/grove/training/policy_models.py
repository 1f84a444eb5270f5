"""The models of a run, placed and wrapped for its world: the policy (optionally with LoRA adapters), the
training module around it (DDP / FSDP2 when launched on several ranks), the reference policy, and the weights
generation runs on; plus loading them from and writing them to a checkpoint.

* Policy: ``model.name`` (or the run ``model.init_from`` names: :mod:`grove.models.initial_weights`), with
  ``model.lora`` adapters (peft) when set; checkpoint weights are loaded into it
  *before* it is wrapped, so every strategy starts from the same full tensors.
* Training module: :class:`grove.models.logprob_module.ResponseLogprobModule` around the policy, wrapped by
  :func:`grove.distributed.strategies.wrap_for_training`.
* Reference policy (when the run needs one: β > 0 or a loss reading reference log-probs): with LoRA, the training module itself with
  its adapters disabled (no second copy); otherwise a second frozen model, sharded like the policy under FSDP2.
* ``train.compile``: the policy's decoder layers compiled (:mod:`grove.models.compiled_layers`) after the
  generation copy is taken, so generation stays eager.
* Generation: a bfloat16 copy (``rollout.bf16_weights``); on a CPU otherwise a copy in the policy's dtype whose
  linear weights are prepacked for oneDNN (``rollout.prepacked_weights``); under FSDP2 a full replica refreshed
  from the shards after each optimizer step; else the policy itself (a GPU, or prepacking off). The static-cache
  engine (``rollout.engine: static_cache``, or ``auto`` on CUDA) keeps its own copy in the generation dtype and
  reads the policy itself (or, under FSDP2, the replica).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from grove.batch import RolloutBatch
from grove.config import ConfigError, GroveConfig
from grove.config.derived import generates_from_bf16_copy
from grove.distributed.checkpoint_state import gather_full_model_state
from grove.distributed.strategies import Strategy, shard_fully, wrap_for_training
from grove.distributed.world import World
from grove.infra import checkpoint as ckpt
from grove.models.compiled_layers import CompileUnavailable, compile_decoder_layers
from grove.models.initial_weights import policy_source
from grove.models.logprob_module import ResponseLogprobModule, response_logprobs
from grove.models.lora import adapters_disabled, apply_lora, load_adapter_weights, save_adapter
from grove.models.pretrained import load_policy
from grove.resolve import ModelNeeds
from grove.rollout.generation_weights import GenerationWeights
from grove.rollout.prepacked_linear import prepacking_supported
from grove.rollout_engines import engine_choice

__all__ = ["PolicyModels", "build_generation_weights", "build_policy_models", "set_activation_checkpointing"]


@dataclass
class PolicyModels:
    causal_lm: nn.Module  # the policy, unwrapped (transformers or peft model)
    train_module: nn.Module  # ResponseLogprobModule around it, wrapped for the strategy
    strategy: Strategy
    tokenizer: object
    reference: nn.Module | None  # ResponseLogprobModule of the reference policy, or the train module (LoRA)
    generation_weights: GenerationWeights | None  # a separate copy generation runs on, refreshed after updates
    lora: bool

    @property
    def generation_model(self) -> nn.Module:
        return self.generation_weights.model if self.generation_weights is not None else self.causal_lm

    def refresh_generation_weights(self) -> None:
        if self.generation_weights is not None:
            self.generation_weights.refresh(self.causal_lm)

    def release_generation_weights(self) -> None:
        """Free the generation copy (if any) until :meth:`refresh_generation_weights`: the update runs without it."""
        if self.generation_weights is not None:
            self.generation_weights.release()

    def logprobs(self, model: nn.Module, batch: RolloutBatch, layout: str, temperature: float) -> Tensor:
        """No-grad log-probs of ``batch``'s responses under ``model`` (CPU float32, usable later in autograd).

        ``no_grad``, not ``inference_mode``: FSDP2 keeps the unsharded parameter buffers it allocates in a forward
        and reuses them in the next, and buffers created under ``inference_mode`` cannot be written outside it."""
        with torch.no_grad():
            logprobs, _ = response_logprobs(model, batch, layout, temperature=temperature)
        return logprobs.float().cpu().clone()

    def reference_logprobs(self, layout: str, temperature: float) -> Callable[[RolloutBatch], Tensor] | None:
        if self.reference is None:
            return None
        if not self.lora:
            return lambda b: self.logprobs(self.reference, b, layout, temperature)

        def with_adapters_off(b: RolloutBatch) -> Tensor:
            with adapters_disabled(self.causal_lm):
                return self.logprobs(self.train_module, b, layout, temperature)

        return with_adapters_off

    def write_model(self, state: dict[str, Tensor]) -> Callable[[Path], None]:
        """What rank 0 writes as the checkpoint's ``model/``: a full ``save_pretrained`` directory, or the adapter."""
        if self.lora:
            return lambda directory: save_adapter(self.causal_lm, directory, state_dict=state)
        if getattr(self.causal_lm.config, "tie_word_embeddings", False):  # gathered copies are no longer one tensor
            state = {k: v for k, v in state.items() if not k.endswith("lm_head.weight")}
        # the in-memory parameter names (save_original_format=False): a checkpoint resumes with a plain
        # load_state_dict, and from_pretrained reads them as well (a vision-language model's would otherwise be
        # renamed to its family's original layout)
        return lambda directory: self.causal_lm.save_pretrained(
            directory, state_dict=state, safe_serialization=True, save_original_format=False
        )

    def write_config(self) -> Callable[[Path], None]:
        """What a sharded checkpoint's ``model/`` holds: the model's config (its weights are in ``sharded/``)."""
        return lambda directory: self.causal_lm.config.save_pretrained(directory)

    def gather_state(self) -> dict[str, Tensor]:
        """The policy's full state dict on rank 0 (every rank must call this)."""
        return gather_full_model_state(self.train_module)


def _load_checkpoint_weights(model: nn.Module, path: Path, lora: bool, model_name: str) -> None:
    """Load the checkpoint's weights (already checked to load: :func:`grove.infra.checkpoint.checkpoint_problem`)
    into the policy; weights that do not fit it (another ``model.name``, LoRA rank or targets) are a
    :class:`ConfigError` saying to resume with the run's own model settings."""
    has_adapter = (path / "model" / "adapter_config.json").is_file()
    if has_adapter != lora:
        raise ConfigError(
            f"checkpoint {path} holds {'LoRA adapters' if has_adapter else 'full weights'} but the config has "
            f"model.lora {'unset' if has_adapter else 'set'}; resume with the config the run was started with"
        )
    try:
        if lora:
            load_adapter_weights(model, path / "model")
        else:
            ckpt.load_model_weights(model, path)
    except (RuntimeError, ValueError) as exc:  # missing / unexpected keys, other shapes
        raise ConfigError(
            f"the weights of checkpoint {path} do not fit model.name {model_name!r}"
            f"{' with its model.lora settings' if lora else ''} ({' '.join(str(exc).split())[:300]}); resume with the "
            "model settings the run was started with (its config.yaml)"
        ) from exc


def set_activation_checkpointing(causal_lm: nn.Module, enabled: bool) -> None:
    """Switch transformers' activation checkpointing (non-reentrant) of ``causal_lm`` on or off
    (``train.activation_checkpointing``; transformers >= 5.2x names it ``activation_checkpointing_*``)."""
    if hasattr(causal_lm, "activation_checkpointing_enable"):
        if enabled:
            causal_lm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            causal_lm.activation_checkpointing_disable()
    elif enabled:
        causal_lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        causal_lm.gradient_checkpointing_disable()


def build_generation_weights(
    cfg: GroveConfig, causal_lm: nn.Module, device: torch.device, *, sharded: bool = False
) -> GenerationWeights | None:
    """The copy generation decodes from (see the module docstring), or ``None`` to decode through the policy."""
    dtype = getattr(torch, cfg.model.dtype)
    prepack = cfg.rollout.prepacked_weights
    if not sharded and engine_choice(cfg.rollout.engine, causal_lm, device)[0] == "static_cache":
        return None  # the engine keeps its own copy of the weights, refreshed in place
    if sharded:  # decode on a full replica, not through the shards
        copy_dtype = torch.bfloat16 if generates_from_bf16_copy(cfg) else dtype
        return GenerationWeights(causal_lm, copy_dtype, prepack=prepack)
    if generates_from_bf16_copy(cfg):
        return GenerationWeights(causal_lm, prepack=prepack)
    if prepack and prepacking_supported(dtype, device):  # decode from a prepacked copy (freed in the update)
        return GenerationWeights(causal_lm, dtype, prepack=True)
    return None


def build_policy_models(cfg: GroveConfig, world: World, resume_from: Path | None, needs: ModelNeeds) -> PolicyModels:
    """The policy's models for ``world`` (see the module docstring), with what the run ``needs`` besides the policy
    (:class:`grove.resolve.ModelNeeds`, from the front door)."""
    dtype = getattr(torch, cfg.model.dtype)
    source = policy_source(cfg.model.name, cfg.model.init_from)
    causal_lm, tokenizer = load_policy(source, dtype=dtype)
    lora = cfg.model.lora is not None
    if lora:
        causal_lm = apply_lora(causal_lm, cfg.model.lora, base_name=source)
    if resume_from is not None and not ckpt.is_sharded(resume_from):  # sharded: loaded once wrapped (run_checkpoint)
        _load_checkpoint_weights(causal_lm, resume_from, lora, cfg.model.name)
    if cfg.train.activation_checkpointing:  # recompute each layer in backward (generation runs in eval: no effect)
        set_activation_checkpointing(causal_lm, True)
    causal_lm.to(world.device)
    sharded = world.distributed and cfg.distributed.strategy == "fsdp2"
    generation_weights = build_generation_weights(cfg, causal_lm, world.device, sharded=sharded)
    if cfg.train.compile:  # after the generation copy is taken: generation stays eager
        if world.distributed:
            raise ConfigError("train.compile is not supported with several ranks yet; set train.compile: false")
        try:
            compile_decoder_layers(causal_lm, world.device)
        except CompileUnavailable as exc:
            raise ConfigError(str(exc)) from exc
    train_module, strategy = wrap_for_training(
        ResponseLogprobModule(causal_lm, cfg.train.packed_attention), cfg.distributed.strategy, world
    )
    reference = None
    if needs.reference:  # β = 0 loads none, unless the policy loss reads the reference log-probs
        if lora:
            reference = train_module
        else:
            ref_lm, _ = load_policy(source, dtype=dtype)
            reference = ResponseLogprobModule(ref_lm, cfg.train.packed_attention).eval().requires_grad_(False)
            reference = reference.to(world.device)
            if sharded:
                reference = shard_fully(reference, world)
    return PolicyModels(causal_lm, train_module, strategy, tokenizer, reference, generation_weights, lora)
