"""The root of the config schema: :class:`GroveConfig`, one field per section.

Unknown keys and wrong types are errors naming the key and the allowed values
(:func:`grove.config.loading.format_validation_error`); components are selected by registry id and
the rules that span several sections of its own fields are checked here when it is validated. Which components
exist and what they require is checked when the config is resolved for a run (:mod:`grove.resolve`). Every key is documented in ``docs/config.md``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from grove.config.algorithm import AlgorithmConfig
from grove.config.components import ComponentSpec
from grove.config.distributed_section import DistributedConfig
from grove.config.env_section import EnvConfig
from grove.config.reward_columns import reward_column_names
from grove.config.rm_section import RmConfig
from grove.config.sections import (
    CheckpointConfig,
    EvalConfig,
    LoggingConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    Section,
    SelectionConfig,
    TrainConfig,
)
from grove.config.sft_section import SftConfig

__all__ = ["MAX_SEED", "GroveConfig"]

#: the largest ``seed``: NumPy's generators take seeds below 2**32, and the seeds a run derives from it (per rank,
#: per resumed step) stay within the 64 bits torch's generators take
MAX_SEED = 2**32 - 1


class GroveConfig(Section):
    imports: list[str] = Field(
        default_factory=list,
        description="Python modules imported before components are looked up (your own estimators, losses, rewards, tasks).",
    )
    seed: int = Field(
        0,
        description=f"Seeds Python, NumPy, torch and the sampling generator: an integer from 0 to {MAX_SEED} (2**32 - 1).",
    )
    output_dir: str = Field(
        "runs/run", description="The run directory (metrics, samples, checkpoints, plots); not empty."
    )
    threads: int | None = Field(
        None, ge=1,
        description="torch CPU threads (null: all cores, and on a CPU other processes use, the cores they leave free, "
        "step by step).",
    )
    host_allocator: Literal["retain", "system"] = Field(
        "retain",
        description="CPU memory allocator policy (Linux/glibc). 'retain': freed large blocks stay in the process heap "
        "(mallopt: no mmap below 1 GiB, trim above ~2 GiB; free pages returned after generation and after each update), "
        "so each step's big buffers are not page-faulted in again (faster updates: docs/benchmarks.md); "
        "'system': glibc's defaults.",
    )
    mkldnn_lru_cache_entries: int | None = Field(
        64,
        ge=1,
        description="How many input shapes PyTorch's oneDNN layer (ideep) keeps a set-up operator for on a CPU "
        "(the LRU_CACHE_CAPACITY variable, PyTorch's default 1024). Every decode step and micro-batch brings new "
        "shapes, and each entry holds a few hundred KB: 64 keeps 0.33 GB less heap in bf16 at the same speed. "
        "null: PyTorch's default; an LRU_CACHE_CAPACITY already in the environment wins.",
    )
    onednn_primitive_cache_entries: int | None = Field(
        128,
        ge=1,
        description="How many primitives (set-up products, one per shape) oneDNN's own cache keeps on a CPU (the "
        "ONEDNN_PRIMITIVE_CACHE_CAPACITY variable, oneDNN's default 1024). Its entries are created among the update's "
        "short-lived buffers and fragment the heap over a run: 128 keeps the bf16 benchmark's peak RSS 0.6 GiB lower "
        "over 6 steps with the same samples and step times. null: oneDNN's default; the environment variable wins.",
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    experience_source: str = Field(
        "auto",
        description="Where a step's experience comes from: 'completions' (single-turn prompts of `task`, scored by "
        "`rewards`), 'environment' (multi-turn episodes of `env`), or 'auto' (environment when `env` is set).",
    )
    task: ComponentSpec = Field(default_factory=lambda: ComponentSpec(id="arithmetic"))
    env: EnvConfig | None = Field(None, description="Multi-turn environment rollouts (docs/agents.md); null = off.")
    rewards: list[RewardConfig] = Field(default_factory=lambda: [RewardConfig(id="answer_match")])
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    distributed: DistributedConfig = Field(
        default_factory=DistributedConfig, description="Multi-process training under torchrun (docs/distributed.md)."
    )
    sft: SftConfig | None = Field(
        None, description="Supervised fine-tuning with `grove sft` (docs/warm-start.md); `grove train` ignores it."
    )
    rm: RmConfig | None = Field(
        None,
        description="Reward-model training with `grove rm` (docs/reward-model-training.md); `grove train` ignores it.",
    )

    @field_validator("seed")
    @classmethod
    def _seed_in_range(cls, value: int) -> int:
        if not 0 <= value <= MAX_SEED:
            digits = str(value)
            shown = digits if len(digits) <= 40 else f"{digits[:20]}... ({len(digits)} digits)"
            raise ValueError(
                f"{shown} is outside the seeds grove takes (NumPy's and torch's generators, and the seeds derived "
                f"from it); give an integer from 0 to {MAX_SEED} (2**32 - 1)"
            )
        return value

    @field_validator("output_dir")
    @classmethod
    def _output_dir_is_a_path(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(
                "empty: the run would be written into the working directory; give a directory, e.g. runs/my-run"
            )
        if "\x00" in value:
            raise ValueError(f"{value!r} holds a NUL character (\\x00), which no path can; remove it")
        return value

    @model_validator(mode="after")
    def _check(self) -> GroveConfig:
        """The rules that span several sections of the config's own fields (no registry, no user code), then
        ``train.precision: auto`` resolved for the run's device; each rule raises ``ValueError`` naming the key and the fix, which :func:`grove.config.loading.format_validation_error`
        prints under the top level."""
        _check_stage_settings(self)
        _check_optimizer_state(self)
        _check_sampled_evaluation(self)
        _resolve_precision(self)
        return self

    @property
    def source_id(self) -> str:
        """The experience source this config selects (``experience_source``, with ``auto`` resolved)."""
        if self.experience_source != "auto":
            return self.experience_source
        return "environment" if self.env is not None else "completions"

    @property
    def accuracy_reward_name(self) -> str:
        """The reward column whose value 1.0 means 'correct': ``eval.accuracy_reward``, or the first reward's first
        objective (its own name for a single-objective reward)."""
        return self.eval.accuracy_reward or reward_column_names(self.rewards[0])[0]

    @property
    def sampled_eval_temperature(self) -> float:
        """The temperature of the sampled evaluation: ``eval.temperature``, else ``rollout.temperature``."""
        return self.eval.temperature if self.eval.temperature is not None else self.rollout.temperature

    def runtime_settings(self, threads: int | None = None) -> dict[str, int | str | None]:
        """The process runtime settings, as keyword arguments of :func:`grove.infra.runtime.configure_runtime`:
        ``threads`` (or the given override), ``host_allocator`` and both oneDNN cache sizes."""
        return {
            "threads": threads if threads is not None else self.threads,
            "host_allocator": self.host_allocator,
            "mkldnn_lru_cache_entries": self.mkldnn_lru_cache_entries,
            "onednn_primitive_cache_entries": self.onednn_primitive_cache_entries,
        }

    def derived(self) -> dict[str, int | str]:
        """The batch quantities the configuration implies (:meth:`TrainConfig.batch_quantities`)."""
        quantities = self.train.batch_quantities()
        if self.source_id == "environment":  # episodes: G copies per env group, one or many samples each
            quantities = {
                "env_groups_per_step": self.train.prompts_per_step,
                "episodes_per_step (G per group)": self.train.completions_per_step,
                "samples_per_step": "variable: one per turn (per_step) or per episode (conversation)",
                "max_turns_per_episode": self.env.max_turns,
                "optimizer_steps_per_rollout": self.train.mini_batches * self.train.ppo_epochs,
                "total_optimizer_steps": self.train.mini_batches * self.train.ppo_epochs * self.train.steps,
            }
        return quantities


def _check_sampled_evaluation(cfg: GroveConfig) -> None:
    if cfg.eval.samples and cfg.sampled_eval_temperature == 0:
        raise ValueError(
            f"eval.samples: {cfg.eval.samples} sampled completions per item need a temperature above 0, and "
            "rollout.temperature is 0 (greedy); set eval.temperature (for example 1.0), or eval.samples: 0"
        )


def _check_stage_settings(cfg: GroveConfig) -> None:
    correction = cfg.algorithm.rollout_correction
    if correction.mode != "none" and cfg.train.old_logprobs != "recompute":
        raise ValueError(
            "algorithm.rollout_correction needs the training engine's old log-probs: set train.old_logprobs: recompute"
        )
    if correction.lower is not None and correction.mode != "mask":
        raise ValueError("algorithm.rollout_correction.lower applies to mode: mask only")
    cache = cfg.algorithm.overlong.cache_tokens
    if cache is not None and cache > cfg.rollout.max_new_tokens:
        raise ValueError(
            f"algorithm.overlong.cache_tokens ({cache}) must not exceed rollout.max_new_tokens "
            f"({cfg.rollout.max_new_tokens})"
        )
    if cfg.algorithm.dynamic_sampling.enabled and cfg.train.completions_per_prompt < 2:
        raise ValueError("algorithm.dynamic_sampling needs train.completions_per_prompt >= 2 (a group's variance)")
    t = cfg.train
    if cfg.source_id == "completions" and t.completions_per_step % t.mini_batches:
        raise ValueError(
            f"train.mini_batches: {t.completions_per_step} completions per step "
            f"(prompts_per_step × completions_per_prompt) do not split into {t.mini_batches} equal mini-batches"
        )


def _check_optimizer_state(cfg: GroveConfig) -> None:
    if cfg.optim.state_dtype == "bf16" and cfg.distributed.strategy == "fsdp2":
        raise ValueError(
            "optim.state_dtype: bf16 stores whole-parameter bfloat16 moments and does not support "
            "distributed.strategy: fsdp2 (sharded parameters); use optim.state_dtype: fp32 with fsdp2, "
            "or distributed.strategy: ddp"
        )


def _resolve_precision(cfg: GroveConfig) -> None:
    """``train.precision: auto`` becomes ``bf16`` where the run's device multiplies bfloat16 natively (a GPU from
    Ampere on; a CPU with AVX512-BF16, AMX or Arm BF16) and ``fp32`` elsewhere, where bf16 products run on a reference
    loop many times slower (:func:`grove.infra.precision.native_bf16_products`). The resolved value is what the run
    records in its ``config.yaml``."""
    if cfg.train.precision != "auto":
        return
    import torch

    from grove.infra.precision import native_bf16_products

    device = cfg.distributed.device
    on_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    cfg.train.precision = "bf16" if native_bf16_products("cuda" if on_gpu else "cpu") else "fp32"
