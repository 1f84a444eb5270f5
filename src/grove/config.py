"""The run configuration: a YAML file validated by pydantic.

Every key is documented in ``docs/config.md``. Unknown keys and wrong types are errors that name
the key and the allowed values (:func:`format_validation_error`). Components (advantage estimator,
policy loss, KL estimator, rewards, task) are selected by registry id; their parameters sit next
to the id and are validated against the parameter model the component registered.
"""

from __future__ import annotations

import difflib
import importlib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grove.core.schedules import KeepRatioSchedule
from grove.presets import expand_preset
from grove.registry import Registry


class ConfigError(ValueError):
    """A configuration problem, phrased for the user (key, problem, fix)."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ComponentSpec(BaseModel):
    """``{id: <registry id>, <param>: <value>, ...}``: a component and its parameters."""

    model_config = ConfigDict(extra="allow")

    id: str

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def validated(self, registry: Registry) -> BaseModel:
        """The parameters, validated against the model the component registered."""
        return registry.validate_params(self.id, self.params)


def _check_component(spec: ComponentSpec, registry: Registry, field: str) -> None:
    if spec.id not in registry:
        close = difflib.get_close_matches(spec.id, registry.ids(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown {registry.kind} {spec.id!r}.{hint} Allowed: {', '.join(registry.ids())}")
    try:
        spec.validated(registry)
    except ValidationError as exc:
        allowed = ", ".join(registry.entry(spec.id).params.model_fields) or "(none)"
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or field}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"{registry.kind} {spec.id!r}: {problems}. Parameters it takes: {allowed}") from None


# --------------------------------------------------------------------------- sections
class ModelConfig(Section):
    name: str = Field(
        "smollm2-135m",
        description="A local transformers model directory, or 'smollm2-135m' for the embedded default.",
    )
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Dtype of the weights.")


class RewardConfig(ComponentSpec):
    weight: float = Field(1.0, description="Weight of this reward in the combined scalar reward.")
    name: str | None = Field(None, description="Display name (defaults to the id).")

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def display_name(self) -> str:
        return self.name or self.id.rsplit(":", 1)[-1]


class RolloutConfig(Section):
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling (0 = off).")
    max_new_tokens: int = Field(64, ge=1, description="Maximum completion length in tokens.")
    stop: list[str] = Field(default_factory=list, description="Stop strings (kept in the completion).")
    system_prompt: str | None = Field(None, description="System prompt; null keeps the chat template's default.")
    use_chat_template: bool = Field(True, description="Wrap prompts with the tokenizer's chat template.")
    bf16_weights: bool = Field(
        False,
        description="Generate from a bfloat16 copy of the policy, refreshed after every optimizer step (faster "
        "decode, +half the weights' memory, larger rollout-vs-training log-prob mismatch).",
    )


class KLConfig(Section):
    estimator: str = Field("k3", description="KL estimator id (k1, k2, k3, low_var_k3, ...).")
    coef: float = Field(0.0, ge=0.0, description="β (initial β when adaptive). 0 loads no reference model.")
    placement: Literal["loss", "reward"] = Field(
        "loss", description="'loss': β·KL aggregated into the loss; 'reward': β·Σ_t KL_t subtracted from the score."
    )
    adaptive: bool = Field(False, description="Adapt β towards a target KL (Ziegler et al. 2019).")
    target: float = Field(0.1, gt=0.0, description="Target per-token KL of the adaptive controller.")
    horizon: int = Field(10_000, ge=1, description="Horizon (in samples) of the adaptive controller.")


class EntropyConfig(Section):
    coef: float = Field(0.0, description="Entropy bonus coefficient (the aggregated entropy is subtracted from the loss).")
    target: float | None = Field(
        None, gt=0.0, description="Adaptive (Skywork-OR1): bonus only below this entropy, coefficient adjusted each step."
    )
    step: float = Field(0.005, gt=0.0, description="Adaptive coefficient change per step.")
    max_coef: float = Field(0.05, ge=0.0, description="Upper bound of the adaptive coefficient.")


class DynamicSamplingConfig(Section):
    enabled: bool = Field(False, description="DAPO: keep sampling groups until prompts_per_step have non-zero reward variance.")
    max_rounds: int = Field(3, ge=1, description="Generation rounds per step at most (the first included).")


class OverlongConfig(Section):
    filter: bool = Field(False, description="DAPO overlong filtering: truncated completions get no loss.")
    soft_penalty: bool = Field(False, description="DAPO soft overlong punishment, added as the reward 'overlong_penalty'.")
    cache_tokens: int | None = Field(
        None, ge=1, description="Length of the penalty ramp before max_new_tokens (default: 20% of it, as DAPO's 4k of 20k)."
    )
    max_penalty: float = Field(1.0, ge=0.0, description="Penalty at (and beyond) max_new_tokens.")


class RolloutCorrectionConfig(Section):
    mode: Literal["none", "truncate", "mask"] = Field(
        "none",
        description="Importance weights for the rollout-vs-training mismatch: 'truncate' (TIS, min(ρ, cap)), "
        "'mask' (MIS, ρ if ρ <= cap else 0). Needs train.old_logprobs: recompute.",
    )
    level: Literal["token", "sequence"] = Field("token", description="ρ per token, or exp(Σ log ρ) per sequence.")
    cap: float = Field(2.0, gt=0.0, description="TIS cap / MIS upper threshold.")
    lower: float | None = Field(None, gt=0.0, description="MIS only: also drop ρ below this (IcePop band).")


class AlgorithmConfig(Section):
    preset: str | None = Field(
        None, description="A named bundle of settings from a paper (grove.presets); keys you set override it."
    )
    advantage: ComponentSpec = Field(
        default_factory=lambda: ComponentSpec(id="grpo"), description="Advantage estimator and its parameters."
    )
    policy_loss: ComponentSpec = Field(
        default_factory=lambda: ComponentSpec(id="ppo_clip"), description="Policy loss and its parameters."
    )
    aggregation: str = Field("token_mean", description="Loss aggregation mode.")
    kl: KLConfig = Field(default_factory=KLConfig)
    entropy: EntropyConfig = Field(default_factory=EntropyConfig)
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    overlong: OverlongConfig = Field(default_factory=OverlongConfig)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)

    @field_validator("aggregation", mode="before")
    @classmethod
    def _normalise_aggregation(cls, v: Any) -> Any:
        # verl spells these with hyphens ("seq-mean-token-sum"); accept both spellings.
        return v.replace("-", "_") if isinstance(v, str) else v


class _KeepRatioSection(Section):
    ratio: KeepRatioSchedule = Field(
        default_factory=KeepRatioSchedule,
        description="Kept fraction per step: a number (constant) or a schedule {kind, start, end, steps, stages}.",
    )


class SampleSelectionConfig(_KeepRatioSection):
    scope: Literal["group", "batch"] = Field(
        "group", description="'group': keep the max-Var(A) subset of each prompt's group; 'batch': over the whole batch."
    )
    advantages: Literal["keep", "recompute"] = Field(
        "keep", description="'keep': kept rollouts keep the advantages computed on the full groups; 'recompute': "
        "recompute them on the kept subset."
    )
    min_per_group: int = Field(2, ge=1, description="Never keep fewer rollouts of a group (or batch) than this.")


class TokenSelectionConfig(_KeepRatioSection):
    scope: Literal["sequence", "micro_batch", "batch"] = Field(
        "sequence",
        description="Rank |A|·H within each completion, across the micro-batch (a group by default), or across the "
        "whole mini-batch (one extra no-grad forward for the entropies).",
    )


class SelectionConfig(Section):
    samples: SampleSelectionConfig | None = Field(
        None, description="D^3S sample-level down-sampling (max Var(A) subset); null = off."
    )
    tokens: TokenSelectionConfig | None = Field(
        None, description="D^3S token-level down-sampling (top |A|·entropy tokens); null = off."
    )


class TrainConfig(Section):
    steps: int = Field(40, ge=1, description="Number of rollout steps (each: generate, score, update).")
    time_budget_seconds: float | None = Field(
        None, gt=0, description="Stop after the step that exhausts this wall-clock budget of the training loop."
    )
    prompts_per_step: int = Field(8, ge=1, description="Prompts sampled per step (number of groups).")
    completions_per_prompt: int = Field(8, ge=1, description="G: completions per prompt (group size).")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per PPO epoch over one step's rollouts.")
    ppo_epochs: int = Field(1, ge=1, description="μ: passes over each step's rollouts.")
    micro_batch_size: int = Field(
        8, ge=1, description="Completions per forward/backward (gradient accumulation); 8 = one group of G = 8."
    )
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="Gradient-norm clipping (null = off).")
    precision: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="'bf16': generation and forward/backward under bfloat16 autocast; master weights, optimizer "
        "state, log-softmax and the loss stay float32.",
    )
    forward: Literal["packed", "shared_prefix", "padded"] = Field(
        "packed",
        description="Training forward layout. 'packed': one padding-free row per prompt with its completions back to "
        "back under a block attention mask (each prompt once, no padding compute); 'shared_prefix': each prompt once, "
        "its KV cache fanned out to padded completions; 'padded': every completion with its own copy of the prompt. "
        "All three give the same values and gradients.",
    )
    logit_cache_mb: float = Field(
        512,
        ge=0,
        description="Keep a micro-batch's float32 softmax (probabilities + log-probs, 8 bytes x predicted tokens x "
        "vocabulary) from forward to backward when it fits in this many MiB; above it, backward recomputes the output "
        "projection chunk by chunk (one extra matmul, memory independent of length). 0: always recompute.",
    )
    old_logprobs: Literal["auto", "recompute"] = Field(
        "auto",
        description="'auto': on-policy updates use the current forward (ratio exactly 1), off-policy ones the rollout's "
        "log-probs; 'recompute': one no-grad training forward before the update (needed by rollout_correction).",
    )

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.completions_per_prompt


class OptimConfig(Section):
    lr: float = Field(1e-6, gt=0.0, description="Peak AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0.0)
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in optimizer steps.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="Learning-rate schedule after warm-up.")
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Cosine floor as a fraction of lr.")


class EvalConfig(Section):
    every: int = Field(0, ge=0, description="Evaluate every N steps (0: only before and after training).")
    max_examples: int | None = Field(None, ge=1, description="Cap on held-out examples (null: the whole split).")
    batch_size: int = Field(64, ge=1, description="Prompts per generation batch during evaluation.")
    max_new_tokens: int | None = Field(None, ge=1, description="Defaults to rollout.max_new_tokens.")
    before_training: bool = Field(True, description="Evaluate the initial model before step 1.")
    accuracy_reward: str | None = Field(
        None, description="Reward name whose value 1.0 means 'correct' (default: the first reward)."
    )


class CheckpointConfig(Section):
    every: int = Field(10, ge=1, description="Save a checkpoint every N steps (and always at the end).")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept on disk (older ones are deleted).")


class LoggingConfig(Section):
    tensorboard: bool = Field(True, description="Write TensorBoard event files to RUN_DIR/tensorboard.")
    samples_per_step: int = Field(4, ge=0, description="Completions written to samples.jsonl per step.")
    progress: bool = Field(True, description="Show the rich progress bar.")


class GroveConfig(Section):
    imports: list[str] = Field(
        default_factory=list,
        description="Python modules imported before components are looked up (your own estimators, losses, rewards, tasks).",
    )
    seed: int = Field(0, description="Seeds Python, NumPy, torch and the sampling generator.")
    output_dir: str = Field("runs/run", description="The run directory (metrics, samples, checkpoints, plots).")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (null: all cores).")
    host_allocator: Literal["retain", "system"] = Field(
        "retain",
        description="CPU memory allocator policy (Linux/glibc). 'retain': freed large blocks stay in the process heap "
        "(mallopt: no mmap below 1 GiB, trim above ~2 GiB; free pages returned after generation and after each update), "
        "so each step's big buffers are not page-faulted in again (≈7% faster updates on the CPU benchmark); "
        "'system': glibc's defaults.",
    )
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: ComponentSpec = Field(default_factory=lambda: ComponentSpec(id="arithmetic"))
    rewards: list[RewardConfig] = Field(default_factory=lambda: [RewardConfig(id="answer_match")])
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @model_validator(mode="after")
    def _check(self) -> GroveConfig:
        import grove.builtin_components  # noqa: F401  (registers every built-in component)

        for module in self.imports:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ValueError(
                    f"imports: cannot import {module!r} ({exc}); it must be importable from the working "
                    "directory or PYTHONPATH"
                ) from None
        from grove.registry import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES
        from grove.tasks.base import TASKS

        _check_component(self.algorithm.advantage, ADVANTAGE_ESTIMATORS, "algorithm.advantage")
        _check_component(self.algorithm.policy_loss, POLICY_LOSSES, "algorithm.policy_loss")
        _check_component(self.task, TASKS, "task")
        if self.algorithm.aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(
                f"algorithm.aggregation: unknown mode {self.algorithm.aggregation!r}; "
                f"allowed: {', '.join(LOSS_AGGREGATIONS.ids())}"
            )
        if self.algorithm.kl.estimator not in KL_ESTIMATORS:
            raise ValueError(
                f"algorithm.kl.estimator: unknown estimator {self.algorithm.kl.estimator!r}; "
                f"allowed: {', '.join(KL_ESTIMATORS.ids())}"
            )
        if not self.rewards:
            raise ValueError("rewards: at least one reward function is required")
        names = [r.display_name for r in self.rewards]
        if len(set(names)) != len(names):
            raise ValueError(f"rewards: names must be unique, got {names}; give each a distinct 'name'")
        from grove.registry import REWARD_FUNCTIONS

        for i, r in enumerate(self.rewards):
            if ":" not in r.id:
                try:
                    _check_component(r, REWARD_FUNCTIONS, f"rewards.{i}")
                except ValueError as exc:
                    raise ValueError(f"rewards.{i}: {exc}") from None
        if self.eval.accuracy_reward is not None and self.eval.accuracy_reward not in names:
            raise ValueError(f"eval.accuracy_reward: {self.eval.accuracy_reward!r} is not a reward name; names: {names}")
        correction = self.algorithm.rollout_correction
        if correction.mode != "none" and self.train.old_logprobs != "recompute":
            raise ValueError(
                "algorithm.rollout_correction needs the training engine's old log-probs: set train.old_logprobs: recompute"
            )
        if correction.lower is not None and correction.mode != "mask":
            raise ValueError("algorithm.rollout_correction.lower applies to mode: mask only")
        cache = self.algorithm.overlong.cache_tokens
        if cache is not None and cache > self.rollout.max_new_tokens:
            raise ValueError(
                f"algorithm.overlong.cache_tokens ({cache}) must not exceed rollout.max_new_tokens "
                f"({self.rollout.max_new_tokens})"
            )
        if self.algorithm.dynamic_sampling.enabled and self.train.completions_per_prompt < 2:
            raise ValueError("algorithm.dynamic_sampling needs train.completions_per_prompt >= 2 (a group's variance)")
        t = self.train
        if t.completions_per_step % t.mini_batches:
            raise ValueError(
                f"train.mini_batches: {t.completions_per_step} completions per step "
                f"(prompts_per_step × completions_per_prompt) do not split into {t.mini_batches} equal mini-batches"
            )
        return self

    # ------------------------------------------------------------------ derived quantities
    @property
    def accuracy_reward_name(self) -> str:
        return self.eval.accuracy_reward or self.rewards[0].display_name

    def derived(self) -> dict[str, int]:
        """The batch quantities the configuration implies (printed by ``grove config show``)."""
        t = self.train
        mini = t.completions_per_step // t.mini_batches
        return {
            "prompts_per_step": t.prompts_per_step,
            "completions_per_step": t.completions_per_step,
            "mini_batch_size (completions per optimizer step)": mini,
            "micro_batch_size (completions per forward/backward)": min(t.micro_batch_size, mini),
            "gradient_accumulation_steps": -(-mini // t.micro_batch_size),
            "optimizer_steps_per_rollout": t.mini_batches * t.ppo_epochs,
            "total_optimizer_steps": t.mini_batches * t.ppo_epochs * t.steps,
            "total_completions": t.completions_per_step * t.steps,
        }


# --------------------------------------------------------------------------- loading
def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML; list items by index: ``rewards.0.weight=2``)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set train.steps=20")
        key, raw = item.split("=", 1)
        value = yaml.safe_load(raw) if raw.strip() else ""
        parts = key.strip().split(".")
        node: Any = data
        for depth, part in enumerate(parts[:-1]):
            node = _child(node, part, ".".join(parts[: depth + 1]), create=True)
        last = parts[-1]
        if isinstance(node, list):
            node[_list_index(node, last, key)] = value
        else:
            node[last] = value
    return data


def _list_index(node: list, part: str, path: str) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"--set {path}: {part!r} is not an index of a list of {len(node)} items")
    return int(part)


def _child(node: Any, part: str, path: str, create: bool) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, part, path)]
    if not isinstance(node, dict):
        raise ConfigError(f"--set {path}: cannot set a key inside a {type(node).__name__}")
    if part not in node or node[part] is None:
        node[part] = {}
    return node[part]


def format_validation_error(exc: ValidationError) -> str:
    """Turn pydantic errors into lines naming the key, the problem and the allowed values."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            allowed = _allowed_keys(err["loc"][:-1])
            close = difflib.get_close_matches(str(err["loc"][-1]), allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            lines.append(f"{loc}: unknown key.{hint} Allowed keys here: {', '.join(allowed)}")
        elif err["type"] == "literal_error":
            lines.append(f"{loc}: {err['msg']} (got {err['input']!r})")
        elif err["type"] == "value_error":
            lines.append(f"{loc}: {str(err['msg']).removeprefix('Value error, ')}")
        else:
            lines.append(f"{loc}: {err['msg']} (got {err.get('input')!r})")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _allowed_keys(loc: tuple) -> list[str]:
    model: Any = GroveConfig
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        inner = getattr(ann, "__args__", None)
        model = next((a for a in (inner or (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return list(model.model_fields)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> GroveConfig:
    """Read a YAML config (safe loader), apply ``--set`` overrides and validate."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {str(p)!r} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{p}: the top level must be a mapping of sections, got {type(loaded).__name__}")
        data = loaded or {}
    data = apply_overrides(data, overrides or [])
    try:
        data = expand_preset(data)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from None
    try:
        return GroveConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def dump_config(cfg: GroveConfig) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
