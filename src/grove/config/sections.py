"""The sections of the config other than ``algorithm`` (model, rewards, rollout, selection, train, optim, eval,
checkpoint, logging). Every field carries its description; ``docs/config.md`` lists them all."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from grove.config.components import ComponentSpec
from grove.config.lora_section import LoraSettings
from grove.core.keep_ratio_schedules import KeepRatioSchedule
from grove.optional_packages import MATPLOTLIB, TENSORBOARD, importable, missing_message


class Section(BaseModel):
    """Base of every section: unknown keys are errors, assignments are validated, and a number must be finite
    (YAML reads ``.inf``, ``.nan`` and ``1e400`` as floats: a learning rate of inf would turn the weights to NaN)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ModelConfig(Section):
    name: str = Field(
        "smollm2-135m",
        description="A local transformers model directory, or 'smollm2-135m' for the embedded default.",
    )
    dtype: Literal["float32", "bfloat16"] = Field("float32", description="Dtype of the weights.")
    lora: LoraSettings | None = Field(
        None, description="LoRA adapters via peft ({r, alpha, target_modules, dropout}); null = full fine-tuning."
    )
    init_from: str | None = Field(
        None,
        description="Start from the weights another run produced: a run directory (its final model/, else its newest "
        "intact checkpoint), a checkpoint directory, or a model directory. model.name is the base model; a LoRA "
        "adapter is merged into it. The reference policy (KL) is this starting model.",
    )


class RewardConfig(ComponentSpec):
    weight: float = Field(1.0, description="Weight of this reward in the combined scalar reward.")
    name: str | None = Field(None, description="Display name (defaults to the id).")
    objectives: list[str] | None = Field(
        None,
        description="Multi-objective rewards: the objective names the function returns (a dict or a row per sample); "
        "default: what the reward declares. A registered reward may be restricted to a subset.",
    )
    objective_weights: dict[str, float] | None = Field(
        None, description="Per-objective factors multiplying `weight` (default 1 each), e.g. {format: 0.5}."
    )
    on_error: Literal["raise", "zero", "skip"] = Field(
        "raise",
        description="What a sample the reward raises on (or returns a malformed/NaN value for) gets: 'raise' stops the "
        "run with an error naming the sample; 'zero': 0.0; 'skip': NaN, i.e. the reward does not apply to it (a sample "
        "no weighted reward then applies to is left out of the step). Counted in reward_errors/<name>.",
    )
    isolation: Literal["none", "process"] = Field(
        "none",
        description="'process': run the reward in its own long-lived worker process (a crash kills only the worker, "
        "which is restarted; needed for timeout_s). The reward must be importable (a module-level function).",
    )
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds a call of the reward (on the whole batch) may take; a slower call is cut off (its worker "
        "killed and restarted) and its samples fail (on_error). Needs isolation: process.",
    )

    @model_validator(mode="after")
    def _timeout_needs_a_process(self) -> RewardConfig:
        if self.timeout_s is not None and self.isolation != "process":
            raise ValueError(
                "timeout_s needs isolation: process (a reward running in the trainer's process cannot be stopped); "
                "set isolation: process, or remove timeout_s"
            )
        return self

    @property
    def display_name(self) -> str:
        return self.name or self.id.rsplit(":", 1)[-1]


class RolloutConfig(Section):
    engine: str = Field(
        "auto",
        description="The rollout engine that generates (registry ROLLOUT_ENGINES): 'auto' (default) is 'static_cache' "
        "on CUDA for the decoders it runs (Llama, Mistral, Qwen2, Qwen3: a preallocated KV cache, the decode step "
        "replayed as a CUDA graph), else 'transformers' (batched decoding with transformers' KV cache in this process).",
    )
    cuda_graphs: bool = Field(
        True,
        description="static_cache engine on CUDA: capture the one-token decode step as a CUDA graph per batch size and "
        "replay it. false runs every step eagerly (slower; for debugging).",
    )
    cache_memory_fraction: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="static_cache engine: the share of the free device memory its KV cache may take; more rows than "
        "fit are decoded in several passes (prefix reuse then keeps nothing for the next turn).",
    )
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    top_k: int = Field(0, ge=0, description="Top-k sampling (0 = off).")
    max_new_tokens: int = Field(64, ge=1, description="Maximum completion length in tokens.")
    stop: list[str] = Field(default_factory=list, description="Stop strings (kept in the completion).")
    system_prompt: str | None = Field(None, description="System prompt; null keeps the chat template's default.")
    use_chat_template: bool = Field(True, description="Wrap prompts with the tokenizer's chat template.")
    bf16_weights: bool | None = Field(
        None,
        description="Generate from a bfloat16 copy of the policy, refreshed after every optimizer step and freed "
        "during the update (faster decode; larger rollout-vs-training log-prob mismatch; the static_cache engine "
        "keeps its own bf16 copy, refreshed in place, instead). null (default): on when train.precision is bf16, off "
        "in fp32.",
    )
    prepacked_weights: bool = Field(
        True,
        description="On a CPU, generate from linear weights held in oneDNN's blocked layout, packed once per "
        "optimizer step instead of inside every product (faster decode): the bf16 copy's layers (rollout.bf16_weights; "
        "bit-identical), or without a bf16 copy a copy of the policy in its own dtype, freed during the update (fp32: "
        "the same products summed in oneDNN's order). false decodes through plain linear layers.",
    )
    exact_top_logits: int = Field(
        64,
        ge=0,
        description="When generation's output projection runs in bfloat16 (a bf16 copy or bf16 autocast), recompute "
        "the N largest logits of each row in float32 from the same operands (a row whose float32 maximum could "
        "still be beaten by a rounded logit is recomputed whole), so greedy picks the float32 argmax and sampling "
        "reads float32 logits where the mass is. Rounding logits to bfloat16 ties and swaps close candidates "
        "(docs/benchmarks.md: greedy FrozenLake 44% with float32 logits, 27% with rounded ones). 0: rounded logits.",
    )
    prefix_reuse: bool = Field(
        True,
        description="Prefill a prompt's cached prefix from its keys and values instead of running it again: the "
        "prefix every prompt of a batch shares is run once, and the turns of a batch of episodes reuse the previous "
        "turn's rows (a conversation prefills only the environment's reply). Same samples; off runs every prompt whole.",
    )
    prompt_overflow: Literal["error", "truncate_left"] = Field(
        "error",
        description="A prompt whose tokens plus max_new_tokens exceed the model's context: 'error' stops with a "
        "message naming it; 'truncate_left' keeps its last tokens that fit (the chat template's tail) and logs it.",
    )


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
    micro_batch_tokens: int | Literal["auto"] | None = Field(
        "auto",
        description="The most tokens (prompt + completion, as the forward runs them) a micro-batch may hold: a "
        "micro-batch of train.micro_batch_size samples that holds more is split (a sample longer than the budget "
        "runs alone). Gradients are sums over micro-batches, so only float rounding changes. 'auto' (default): "
        "half of the memory available when the update starts (RAM on a CPU, free device memory on a GPU) divided by "
        "one token's training activations for this model, precision and train.activation_checkpointing, so that "
        "long agent conversations are split instead of running out of memory; null: no token budget.",
    )
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="Gradient-norm clipping (null = off).")
    precision: Literal["fp32", "bf16", "auto"] = Field(
        "fp32",
        description="'bf16': generation and forward/backward under bfloat16 autocast; master weights, optimizer "
        "state, log-softmax and the loss stay float32. 'auto': bf16 where the device multiplies bfloat16 natively "
        "(GPUs from Ampere on; CPUs with AVX512-BF16, AMX or Arm BF16), else fp32 (an AVX2-only CPU runs bf16 products "
        "on a reference loop, many times slower per step); the run's config.yaml records the choice.",
    )
    forward: Literal["packed", "shared_prefix", "padded"] = Field(
        "packed",
        description="Training forward layout. 'packed': one padding-free row per prompt with its completions back to "
        "back under a block attention mask (each prompt once, no padding compute); when a group's prompts differ "
        "after a common beginning (an agent's per-step prompts), that beginning runs once as in 'shared_prefix' if "
        "this runs fewer positions. 'shared_prefix': the tokens a group's prompts share run once, their KV cache "
        "fanned out to each row's remaining prompt and padded completion (best for agent episodes trained as one "
        "long conversation). 'padded': every completion with its own copy of the prompt. All three give the same "
        "values and gradients.",
    )
    packed_attention: Literal["auto", "dense_mask", "flex"] = Field(
        "auto",
        description="Attention kernel of the packed rows (train.forward: packed). 'flex': PyTorch's flex attention "
        "under a block mask built from each row's segments (a completion sees its prompt and its own earlier tokens), "
        "so no token attends across packed samples, fully hidden tiles are skipped and no [T, T] mask exists; needs "
        "CUDA for gradients and a model on 'sdpa' (or flex_attention) attention. 'dense_mask': a dense boolean "
        "[T, T] mask per row (memory and compute quadratic in the row length). 'auto': 'flex' on CUDA where the "
        "model supports it, else 'dense_mask'. Same values and gradients either way.",
    )
    logit_cache_mb: float = Field(
        512,
        ge=0,
        description="Keep a micro-batch's float32 softmax (probabilities + log-probs, 8 bytes x predicted tokens x "
        "vocabulary) from forward to backward when it fits in this many MiB; above it, backward recomputes the output "
        "projection chunk by chunk (one extra matmul, memory independent of length). 0: always recompute.",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Keep only each decoder layer's input from forward to backward and recompute the layer in "
        "backward (transformers' gradient checkpointing, non-reentrant): activation memory of a micro-batch drops "
        "from every layer's intermediates to one hidden vector per layer and token, for about one extra forward "
        "(~+30% update time). For long sequences; off by default.",
    )
    skip_zero_advantage: bool = Field(
        True,
        description="Leave the samples whose advantages are all zero (e.g. every completion of a group got the same "
        "reward) out of the update's forward and backward: their policy-gradient term is exactly zero, so the "
        "gradients and the optimizer step are unchanged. Applies only where that is exact: a policy loss and an "
        "aggregation that declare it (every built-in except clip_cov, kl_cov and micro_token_mean), no KL term in the "
        "loss, no entropy bonus or entropy target, D^3S token selection only within each completion (selection.tokens."
        "scope: sequence). Per-token statistics (entropy, clip "
        "fractions, log-prob mismatch) are then averaged over the samples computed; `zero_advantage_samples_skipped` "
        "counts the others. false: compute every sample.",
    )
    compile: bool = Field(
        False,
        description="Compile each decoder layer of the training model with torch.compile (inductor, dynamic shapes; "
        "grove.models.compiled_layers): fused elementwise work around the matrix products. Costs one compilation "
        "in the first update, then each update is shorter (benchmarks/vs_trl.py; docs/benchmarks.md). Same numbers "
        "as eager up to float rounding. Needs a C++ compiler on a CPU; one process only (not with DDP / FSDP2).",
    )
    old_logprobs: Literal["auto", "recompute"] = Field(
        "auto",
        description="'auto': on-policy updates use the current forward (ratio exactly 1), off-policy ones the rollout's "
        "log-probs; 'recompute': one no-grad training forward before the update (needed by rollout_correction).",
    )

    max_skipped_steps: int = Field(
        3,
        ge=1,
        description="A non-finite loss, gradient norm or advantage skips that optimizer step (gradients dropped, the "
        "step counted in `skipped_steps`); after this many consecutive skipped steps the run stops with an error, "
        "its last good checkpoint intact. Likewise a step in which the environment failed in every copy "
        "(`environment_failed_step`): this many in a row stop the run naming the environment.",
    )

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.completions_per_prompt

    def batch_quantities(self) -> dict[str, int]:
        """The batch quantities this section implies (printed by ``grove config show``)."""
        mini = self.completions_per_step // self.mini_batches
        return {
            "prompts_per_step": self.prompts_per_step,
            "completions_per_step": self.completions_per_step,
            "mini_batch_size (completions per optimizer step)": mini,
            "micro_batch_size (completions per forward/backward)": min(self.micro_batch_size, mini),
            "gradient_accumulation_steps": -(-mini // self.micro_batch_size),
            "optimizer_steps_per_rollout": self.mini_batches * self.ppo_epochs,
            "total_optimizer_steps": self.mini_batches * self.ppo_epochs * self.steps,
            "total_completions": self.completions_per_step * self.steps,
        }


AdamBeta = Annotated[float, Field(ge=0.0, lt=1.0)]


class OptimConfig(Section):
    lr: float = Field(1e-6, gt=0.0, description="Peak AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0)
    betas: tuple[AdamBeta, AdamBeta] = Field(
        (0.9, 0.999), description="AdamW's decay rates of the first and second moments, each in [0, 1)."
    )
    eps: float = Field(1e-8, gt=0.0)
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in optimizer steps.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="Learning-rate schedule after warm-up.")
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Cosine floor as a fraction of lr.")
    state_dtype: Literal["fp32", "bf16"] = Field(
        "fp32",
        description="Storage of AdamW's two moments. 'fp32': torch's fused AdamW. 'bf16': moments in bfloat16 with "
        "stochastic rounding (grove.training.low_precision_adamw), 4 bytes less per parameter (0.54 GB on the 135M "
        "default), update arithmetic in float32; not with distributed.strategy fsdp2.",
    )


class EvalConfig(Section):
    every: int = Field(0, ge=0, description="Evaluate every N steps (0: only before and after training).")
    max_examples: int | None = Field(None, ge=1, description="Cap on held-out examples (null: the whole split).")
    batch_size: int = Field(64, ge=1, description="Prompts per generation batch during evaluation.")
    max_new_tokens: int | None = Field(None, ge=1, description="Defaults to rollout.max_new_tokens.")
    before_training: bool = Field(True, description="Evaluate the initial model before step 1.")
    samples: int = Field(
        0,
        ge=0,
        le=1024,
        description="Besides the greedy pass, sample N completions (with an env: N episodes) per held-out item at "
        "eval.temperature: reports sampled/accuracy (an env: the success rate) with a 95% interval over the items, "
        "and the unbiased sampled/pass@k for k = 1, 2, 4, ... up to N. 0: greedy only. The samples draw on a "
        "generator seeded by the run's seed, so every evaluation of a run samples alike.",
    )
    temperature: float | None = Field(
        None, gt=0.0, description="Temperature of the sampled evaluation (eval.samples); null: rollout.temperature."
    )
    accuracy_reward: str | None = Field(
        None, description="Reward name whose value 1.0 means 'correct' (default: the first reward)."
    )


class CheckpointConfig(Section):
    @field_validator("every", mode="before")
    @classmethod
    def _null_is_off(cls, v: object) -> object:
        return 0 if v is None else v

    every: int = Field(
        10,
        ge=0,
        description="Save a checkpoint every N steps, and always at the end (and when a signal stops the run). 0 or "
        "null: no periodic checkpoints, only the one at the end, which resume, `model.init_from` and the model "
        "`grove sft` exports read.",
    )
    keep_last: int = Field(2, ge=1, description="Checkpoints kept on disk (older ones are deleted).")
    format: Literal["full", "sharded"] = Field(
        "full",
        description="How the model and optimizer states are written. full: gathered to rank 0, which writes "
        "model/ as a plain transformers model (safetensors) and the optimizer state into trainer_state.pt. "
        "sharded: every rank writes its own shard with torch.distributed.checkpoint into sharded/ (no rank holds "
        "a full copy; meant for distributed.strategy: fsdp2 and models whose full states do not fit rank 0's "
        "memory); model/ then holds only the config and tokenizer. Either format resumes under any strategy and "
        "world size; `grove export` and model.init_from read full checkpoints only (docs/distributed.md).",
    )


class TokenDetailsConfig(Section):
    every: int = Field(
        10,
        ge=0,
        description="Write the per-token details of some training samples (RUN_DIR/token_details.jsonl: each response "
        "token with its log-prob, entropy, advantage, loss mask and D^3S kept flag, for `grove view`) on step 1 and "
        "on every step that is a multiple of N. 0: off.",
    )
    max_samples: int = Field(
        16,
        ge=1,
        description="Samples recorded per recorded step: whole prompt groups in batch order while they fit (the "
        "first group's first N samples when it alone is larger).",
    )


class LoggingConfig(Section):
    tensorboard: bool | None = Field(
        None,
        description="Write TensorBoard event files to RUN_DIR/tensorboard. Unset: where the tensorboard package is "
        "installed (pip install 'grove[tensorboard]'); true: required (the config check stops when it is missing); "
        "false: never.",
    )
    samples_per_step: int = Field(4, ge=0, description="Completions written to samples.jsonl per step.")
    progress: bool = Field(True, description="Show the rich progress bar.")
    heartbeat_seconds: float = Field(
        60.0,
        ge=0.0,
        description="During a phase that prints nothing for this long (an evaluation, a step that compiles, an "
        "environment evaluation of many episodes), print what the run is doing and how far it is, to a terminal or a "
        "log file alike. 0: off.",
    )
    plots: bool | None = Field(
        None,
        description="Draw RUN_DIR/plots/*.png (training curves, held-out accuracy, one panel per objective) when "
        "grove train, sft or rm finishes. Unset: where matplotlib is installed (pip install 'grove[plots]'); true: "
        "required (the config check stops when it is missing); false leaves them to grove plot RUN_DIR or grove "
        "view (sweeps of many runs, where nobody looks at each run's figures).",
    )
    token_details: TokenDetailsConfig = Field(
        default_factory=TokenDetailsConfig,
        description="Per-token details of training samples in RUN_DIR/token_details.jsonl ({every, max_samples}).",
    )

    @field_validator("tensorboard", "plots")
    @classmethod
    def _package_installed_when_required(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        """``true`` asks for a package the core goes without: stop here when it is not installed."""
        package = TENSORBOARD if info.field_name == "tensorboard" else MATPLOTLIB
        if value is True and not importable(package.module):
            raise ValueError(
                f"{missing_message(package, 'true')}; or leave logging.{info.field_name} unset to write them only "
                "where it is installed"
            )
        return value
