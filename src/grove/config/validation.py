"""Checks that span several fields or sections of the config, run when a :class:`GroveConfig` is validated.

Each raises ``ValueError`` with a message that names the key (``algorithm.rollout_correction``, …) and
says how to fix it; pydantic reports it under the config's top level and
:func:`grove.config.loading.format_validation_error` prints it as it is.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from grove.config.components import ComponentSpec, check_component

if TYPE_CHECKING:
    from grove.config.schema import GroveConfig

__all__ = ["validate_config"]


def validate_config(cfg: GroveConfig) -> None:
    """Import ``cfg.imports``, check every component block against its registry, then the cross-field rules."""
    import grove.builtin_components  # noqa: F401  (registers every built-in component)

    _import_user_modules(cfg.imports)
    _check_algorithm_components(cfg)
    _check_rewards(cfg)
    _check_reward_aggregation(cfg)
    _check_stages(cfg)
    _check_experience_source(cfg)
    _check_optimizer_state(cfg)
    _check_sampled_evaluation(cfg)
    _resolve_precision(cfg)


def _check_sampled_evaluation(cfg: GroveConfig) -> None:
    if cfg.eval.samples and cfg.sampled_eval_temperature == 0:
        raise ValueError(
            f"eval.samples: {cfg.eval.samples} sampled completions per item need a temperature above 0, and "
            "rollout.temperature is 0 (greedy); set eval.temperature (for example 1.0), or eval.samples: 0"
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


def _import_user_modules(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except (ImportError, ValueError, TypeError) as exc:  # ValueError: '', TypeError: a relative name
            raise ValueError(
                f"imports: cannot import {module!r} ({exc}); it must be importable from the working "
                "directory or PYTHONPATH"
            ) from None


def _check_algorithm_components(cfg: GroveConfig) -> None:
    from grove.registry import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES
    from grove.tasks.task import TASKS

    check_component(cfg.algorithm.advantage, ADVANTAGE_ESTIMATORS, "algorithm.advantage")
    check_component(cfg.algorithm.policy_loss, POLICY_LOSSES, "algorithm.policy_loss")
    check_component(cfg.task, TASKS, "task")
    if cfg.algorithm.aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"algorithm.aggregation: unknown mode {cfg.algorithm.aggregation!r}; "
            f"allowed: {', '.join(LOSS_AGGREGATIONS.ids())}"
        )
    if cfg.algorithm.kl.estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"algorithm.kl.estimator: unknown estimator {cfg.algorithm.kl.estimator!r}; "
            f"allowed: {', '.join(KL_ESTIMATORS.ids())}"
        )


def _check_rewards(cfg: GroveConfig) -> None:
    from grove.registry import REWARD_FUNCTIONS

    if not cfg.rewards:
        raise ValueError("rewards: at least one reward function is required")
    names = [r.display_name for r in cfg.rewards]
    if len(set(names)) != len(names):
        raise ValueError(f"rewards: names must be unique, got {names}; give each a distinct 'name'")
    for i, r in enumerate(cfg.rewards):
        if ":" not in r.id:
            try:
                check_component(r, REWARD_FUNCTIONS, f"rewards.{i}")
            except ValueError as exc:
                raise ValueError(f"rewards.{i}: {exc}") from None
    columns = [c for r in cfg.rewards for c in reward_column_names(r)]
    if len(set(columns)) != len(columns):
        raise ValueError(
            f"rewards: reward/objective names must be unique, got {columns}; give a reward a distinct 'name' or "
            f"restrict its 'objectives'"
        )
    weights = [
        r.weight * (r.objective_weights or {}).get(name, 1.0) for r in cfg.rewards for name in reward_column_names(r)
    ]
    if cfg.source_id == "completions" and not any(weights) and not cfg.algorithm.overlong.soft_penalty:
        raise ValueError(
            "rewards: every reward and objective has weight 0 (logged only), so no sample could be scored; give at "
            "least one a non-zero weight"
        )
    if cfg.eval.accuracy_reward is not None and cfg.eval.accuracy_reward not in columns:
        raise ValueError(
            f"eval.accuracy_reward: {cfg.eval.accuracy_reward!r} is not a reward or objective name; names: {columns}"
        )


def reward_column_names(reward) -> tuple[str, ...]:
    """The reward-matrix columns a ``rewards:`` block fills: its declared ``objectives``, a registered reward's
    ``objective_names()``, a user function's ``objectives`` attribute, else its display name."""
    from grove.registry import REWARD_FUNCTIONS, import_callable

    if reward.objectives:
        return tuple(reward.objectives)
    if ":" in reward.id:
        try:
            own = getattr(import_callable(reward.id, "reward"), "objectives", None)
        except Exception:  # noqa: BLE001 - reported when the reward is resolved for the run
            own = None
    else:
        params = reward.validated(REWARD_FUNCTIONS)
        own = params.objective_names() if hasattr(params, "objective_names") else None
    return tuple(own) if own else (reward.display_name,)


def _check_reward_aggregation(cfg: GroveConfig) -> None:
    from grove.registry import ADVANTAGE_ESTIMATORS, REWARD_AGGREGATORS

    spec = cfg.algorithm.reward_aggregation
    try:
        check_component(spec, REWARD_AGGREGATORS, "algorithm.reward_aggregation")
    except ValueError as exc:
        raise ValueError(f"algorithm.reward_aggregation: {exc}") from None
    if cfg.source_id == "environment" and spec.id != "sum_then_normalize":
        raise ValueError(
            "algorithm.reward_aggregation applies to the `rewards:` of single-turn completions; environment episodes "
            "are scored by their returns. Remove it (or use sum_then_normalize)"
        )
    params = spec.validated(REWARD_AGGREGATORS)
    estimator = cfg.algorithm.advantage.id
    if getattr(params, "produces_advantages", lambda: False)() and estimator != "score_as_advantage":
        raise ValueError(
            f"algorithm.reward_aggregation: {spec.id!r} with these settings already returns normalised advantages; "
            f"the estimator {estimator!r} would normalise them a second time. Set algorithm.advantage.id: "
            f"score_as_advantage (the gdpo preset does), or reward_aggregation.renormalize: none to feed {estimator!r}"
        )
    if "groups" in REWARD_AGGREGATORS.entry(spec.id).requires and "greedy_baseline" in ADVANTAGE_ESTIMATORS.entry(
        estimator
    ).requires:
        raise ValueError(
            f"algorithm.advantage: {estimator!r} scores a lone greedy completion per prompt, which the group statistics "
            f"of reward_aggregation {spec.id!r} cannot score; use a per-sample aggregator (sum_then_normalize, gated, "
            f"ensemble_min, mean_minus_std)"
        )


def _check_stages(cfg: GroveConfig) -> None:
    from grove.registry import ADVANTAGE_ESTIMATORS

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
    estimator = cfg.algorithm.advantage.id
    if cfg.train.completions_per_prompt < 2 and "groups" in ADVANTAGE_ESTIMATORS.entry(estimator).requires:
        raise ValueError(
            f"train.completions_per_prompt: 1 with algorithm.advantage {estimator!r}, which compares each sample with "
            "the other completions of its prompt: with one completion there is none, so no advantage is "
            "group-relative (a lone sample gets its raw score, 0 or an error, depending on the estimator). Set "
            "train.completions_per_prompt >= 2, or choose an estimator that needs no group (reinforce_pp, remax)"
        )
    params = cfg.algorithm.advantage.validated(ADVANTAGE_ESTIMATORS)
    smallest = params.min_group_size() if hasattr(params, "min_group_size") else 1
    if cfg.train.completions_per_prompt < smallest:
        raise ValueError(
            f"train.completions_per_prompt ({cfg.train.completions_per_prompt}) is smaller than the groups "
            f"algorithm.advantage {estimator!r} takes with these parameters (at least {smallest}); raise it, or lower "
            f"the estimator's parameter (e.g. k)"
        )
    if cfg.algorithm.dynamic_sampling.enabled and cfg.train.completions_per_prompt < 2:
        raise ValueError("algorithm.dynamic_sampling needs train.completions_per_prompt >= 2 (a group's variance)")
    t = cfg.train
    if cfg.source_id == "completions" and t.completions_per_step % t.mini_batches:
        raise ValueError(
            f"train.mini_batches: {t.completions_per_step} completions per step "
            f"(prompts_per_step × completions_per_prompt) do not split into {t.mini_batches} equal mini-batches"
        )


def _check_experience_source(cfg: GroveConfig) -> None:
    from grove.registry import ACTION_PARSERS, ADVANTAGE_ESTIMATORS, ENVIRONMENTS, EXPERIENCE_SOURCES

    if cfg.experience_source != "auto" and cfg.experience_source not in EXPERIENCE_SOURCES:
        raise ValueError(
            f"experience_source: unknown source {cfg.experience_source!r}; allowed: auto, "
            f"{', '.join(EXPERIENCE_SOURCES.ids())}"
        )
    requires = ADVANTAGE_ESTIMATORS.entry(cfg.algorithm.advantage.id).requires
    if cfg.source_id != "environment":
        if "steps" in requires:
            raise ValueError(
                f"algorithm.advantage: {cfg.algorithm.advantage.id!r} needs environment steps; add an `env` section "
                "(multi-turn episodes) or choose an outcome estimator such as grpo"
            )
        return
    e = cfg.env
    if e is None:
        raise ValueError("experience_source: environment needs an `env` section (env.id, env.params, ...)")
    if "id" in e.params:
        raise ValueError("env.params: 'id' is not a parameter; the environment is chosen by env.id")
    if ":" not in e.id:  # a user factory by import path is checked when it is built
        try:
            check_component(ComponentSpec(id=e.id, **e.params), ENVIRONMENTS, "env")
        except ValueError as exc:
            if e.id in ENVIRONMENTS:
                raise ValueError(f"env.params: {exc}") from None
            raise ValueError(f"env.id: {exc}, or an import path 'package.module:factory'") from None
    check_component(e.action_parser, ACTION_PARSERS, "env.action_parser")
    if e.prompt == "conversation" and not cfg.rollout.use_chat_template:
        raise ValueError("env.prompt: conversation needs rollout.use_chat_template: true (token-exact chat turns)")
    a = cfg.algorithm
    if "greedy_baseline" in requires:
        raise ValueError(
            f"algorithm.advantage: {a.advantage.id!r} needs a greedy completion per prompt, which environment "
            "episodes do not provide; choose gigpo, episode_grpo, step_discounted_return or an outcome estimator"
        )
    if a.overlong.filter or a.overlong.soft_penalty:
        raise ValueError(
            "algorithm.overlong applies to single-turn completions; for episodes bound turns with env.max_turns "
            "and rollout.max_new_tokens"
        )
    if a.kl.placement == "reward" and "steps" in requires:
        raise ValueError(
            "algorithm.kl.placement: reward changes sample scores, which step estimators do not read; use "
            "kl.placement: loss with environment steps"
        )


def _check_optimizer_state(cfg: GroveConfig) -> None:
    if cfg.optim.state_dtype == "bf16" and cfg.distributed.strategy == "fsdp2":
        raise ValueError(
            "optim.state_dtype: bf16 stores whole-parameter bfloat16 moments and does not support "
            "distributed.strategy: fsdp2 (sharded parameters); use optim.state_dtype: fp32 with fsdp2, "
            "or distributed.strategy: ddp"
        )
