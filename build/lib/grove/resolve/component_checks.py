"""The checks of a config against the registries and the user's code, run when a config is resolved for a run.

Which components exist, what parameters each takes and what each requires (an estimator that compares a group, a
source with environment steps, a greedy baseline) is only known once the built-in components are registered and
``imports`` are imported; :func:`check_components` runs those checks. Each raises ``ValueError`` with a message that names the key and says how to fix it.
"""

from __future__ import annotations

import importlib

import grove.builtin_components  # noqa: F401  (registers every built-in component)
from grove.config import GroveConfig
from grove.config.components import ComponentParamsError, ComponentSpec, check_component
from grove.config.reward_columns import reward_column_names
from grove.registry import (
    ACTION_PARSERS,
    ADVANTAGE_ESTIMATORS,
    ENVIRONMENTS,
    EXPERIENCE_SOURCES,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    REWARD_AGGREGATORS,
    REWARD_FUNCTIONS,
    ROLLOUT_ENGINES,
    STEP_ANNOTATORS,
    MayProduceAdvantages,
    MissingExtraError,
    NamesObjectives,
    NeedsLargerGroups,
)
from grove.tasks.task import TASKS

__all__ = ["check_components"]


def check_components(cfg: GroveConfig) -> None:
    """Import ``cfg.imports``, check every component block against its registry, then the rules that depend on
    what the components require."""
    _import_user_modules(cfg.imports)
    _check_algorithm_components(cfg)
    _check_rewards(cfg)
    _check_reward_aggregation(cfg)
    _check_group_sizes(cfg)
    _check_experience_source(cfg)


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
    check_component(cfg.algorithm.advantage, ADVANTAGE_ESTIMATORS, "algorithm.advantage")
    check_component(cfg.algorithm.policy_loss, POLICY_LOSSES, "algorithm.policy_loss")
    check_component(cfg.task, TASKS, "task")
    if cfg.algorithm.aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(
            f"algorithm.aggregation: unknown mode {cfg.algorithm.aggregation!r}; "
            f"allowed: {', '.join(LOSS_AGGREGATIONS.ids())}"
        )
    if cfg.rollout.engine not in ROLLOUT_ENGINES:
        raise ValueError(
            f"rollout.engine: unknown engine {cfg.rollout.engine!r}; allowed: {', '.join(ROLLOUT_ENGINES.ids())}"
        )
    if cfg.algorithm.kl.estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"algorithm.kl.estimator: unknown estimator {cfg.algorithm.kl.estimator!r}; "
            f"allowed: {', '.join(KL_ESTIMATORS.ids())}"
        )


def _check_rewards(cfg: GroveConfig) -> None:
    if not cfg.rewards:
        raise ValueError("rewards: at least one reward function is required")
    names = [r.display_name for r in cfg.rewards]
    if len(set(names)) != len(names):
        raise ValueError(f"rewards: names must be unique, got {names}; give each a distinct 'name'")
    for i, r in enumerate(cfg.rewards):
        if ":" not in r.id:
            try:
                check_component(r, REWARD_FUNCTIONS, f"rewards.{i}")
            except ComponentParamsError:  # its message names the full key
                raise
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


def _check_reward_aggregation(cfg: GroveConfig) -> None:
    spec = cfg.algorithm.reward_aggregation
    try:
        check_component(spec, REWARD_AGGREGATORS, "algorithm.reward_aggregation")
    except ComponentParamsError:
        raise
    except ValueError as exc:
        raise ValueError(f"algorithm.reward_aggregation: {exc}") from None
    if cfg.source_id == "environment" and spec.id != "sum_then_normalize":
        raise ValueError(
            "algorithm.reward_aggregation applies to the `rewards:` of single-turn completions; environment episodes "
            "are scored by their returns. Remove it (or use sum_then_normalize)"
        )
    params = spec.validated(REWARD_AGGREGATORS)
    if REWARD_AGGREGATORS.entry(spec.id).declares(NamesObjectives):  # gated: the names it gives must be objectives
        names = tuple(c for r in cfg.rewards for c in reward_column_names(r))
        params.check_objectives(names + (("overlong_penalty",) if cfg.algorithm.overlong.soft_penalty else ()))
    estimator = cfg.algorithm.advantage.id
    produces = REWARD_AGGREGATORS.entry(spec.id).declares(MayProduceAdvantages) and params.produces_advantages()
    if produces and estimator != "score_as_advantage":
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


def _check_group_sizes(cfg: GroveConfig) -> None:
    estimator = cfg.algorithm.advantage.id
    if cfg.train.completions_per_prompt < 2 and "groups" in ADVANTAGE_ESTIMATORS.entry(estimator).requires:
        raise ValueError(
            f"train.completions_per_prompt: 1 with algorithm.advantage {estimator!r}, which compares each sample with "
            "the other completions of its prompt: with one completion there is none, so no advantage is "
            "group-relative (a lone sample gets its raw score, 0 or an error, depending on the estimator). Set "
            "train.completions_per_prompt >= 2, or choose an estimator that needs no group (reinforce_pp, remax)"
        )
    params = cfg.algorithm.advantage.validated(ADVANTAGE_ESTIMATORS)
    entry = ADVANTAGE_ESTIMATORS.entry(estimator)
    smallest = params.min_group_size() if entry.declares(NeedsLargerGroups) else 1
    if cfg.train.completions_per_prompt < smallest:
        raise ValueError(
            f"train.completions_per_prompt ({cfg.train.completions_per_prompt}) is smaller than the groups "
            f"algorithm.advantage {estimator!r} takes with these parameters (at least {smallest}); raise it, or lower "
            f"the estimator's parameter (e.g. k)"
        )


def _check_experience_source(cfg: GroveConfig) -> None:
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
    missing = sorted(ADVANTAGE_ESTIMATORS.entry(cfg.algorithm.advantage.id).step_columns - set(STEP_ANNOTATORS.ids()))
    if missing:
        raise ValueError(
            f"algorithm.advantage: {cfg.algorithm.advantage.id!r} reads the step-table columns {missing}, which no step "
            f"annotator produces (registered: {', '.join(STEP_ANNOTATORS.ids())}); register one in STEP_ANNOTATORS"
        )
    e = cfg.env
    if e is None:
        raise ValueError("experience_source: environment needs an `env` section (env.id, env.params, ...)")
    if "id" in e.params:
        raise ValueError("env.params: 'id' is not a parameter; the environment is chosen by env.id")
    if ":" not in e.id:  # a user factory by import path is checked when it is built
        try:
            check_component(ComponentSpec(id=e.id, **e.params), ENVIRONMENTS, "env.params")
        except ComponentParamsError:
            raise
        except MissingExtraError as exc:
            raise ValueError(f"env.id: {exc}") from None
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
