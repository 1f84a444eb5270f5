"""The rules of a config that depend on what its components hold, checked by the front door on the entries it
looked up (:class:`grove.resolve.run_plan.RunEntries`).

What a component needs is read from its declaration: its :class:`grove.registry.Requires` (an estimator that compares
a group, one that reads environment steps or a scored greedy completion) and the protocols its parameter model
implements (:class:`grove.registry.NeedsLargerGroups`, :class:`grove.registry.NamesObjectives`,
:class:`grove.registry.MayProduceAdvantages`). Each rule raises ``ValueError`` with a message that names the key and
says how to fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grove.config import GroveConfig
from grove.registry import (
    MayProduceAdvantages,
    NamesObjectives,
    NeedsLargerGroups,
    Requires,
)

if TYPE_CHECKING:
    from grove.resolve.run_entries import RunEntries

__all__ = ["check_components"]


def check_components(cfg: GroveConfig, entries: RunEntries, reward_columns: tuple[tuple[str, ...], ...]) -> None:
    """Every rule of the module docstring, in the order a user meets them; ``reward_columns``: each reward's
    objective names."""
    _check_rewards(cfg, reward_columns)
    _check_reward_combination(cfg, entries, tuple(c for columns in reward_columns for c in columns))
    _check_group_sizes(cfg, entries)
    if cfg.source_id == "environment":
        _check_environment_run(cfg, entries)
    elif entries.advantage.entry.needs(Requires.STEPS):
        raise ValueError(
            f"algorithm.advantage: {entries.advantage.id!r} needs environment steps; add an `env` section "
            "(multi-turn episodes) or choose an outcome estimator such as grpo"
        )


def _check_rewards(cfg: GroveConfig, reward_columns: tuple[tuple[str, ...], ...]) -> None:
    if not cfg.rewards:
        raise ValueError("rewards: at least one reward function is required")
    names = [r.display_name for r in cfg.rewards]
    if len(set(names)) != len(names):
        raise ValueError(f"rewards: names must be unique, got {names}; give each a distinct 'name'")
    columns = [c for per_reward in reward_columns for c in per_reward]
    if len(set(columns)) != len(columns):
        raise ValueError(
            f"rewards: reward/objective names must be unique, got {columns}; give a reward a distinct 'name' or "
            f"restrict its 'objectives'"
        )
    weights = [
        r.weight * (r.objective_weights or {}).get(name, 1.0)
        for r, names in zip(cfg.rewards, reward_columns, strict=True) for name in names
    ]
    if cfg.source_id == "completions" and not any(weights) and not cfg.algorithm.overlong.soft_penalty:
        raise ValueError(
            "rewards: every reward and objective has weight 0 (logged only), so no sample could be scored; give at "
            "least one a non-zero weight"
        )
    if cfg.eval.accuracy_reward is not None and cfg.eval.accuracy_reward not in columns:
        raise ValueError(
            f"eval.accuracy_reward: {cfg.eval.accuracy_reward!r} is not a reward or objective name; names: "
            f"{columns}"
        )


def _check_reward_combination(cfg: GroveConfig, entries: RunEntries, columns: tuple[str, ...]) -> None:
    combiner, estimator = entries.reward_combiner, entries.advantage
    if cfg.source_id == "environment" and combiner.id != "sum_then_normalize":
        raise ValueError(
            "algorithm.reward_combination applies to the `rewards:` of single-turn completions; environment episodes "
            "are scored by their returns. Remove it (or use sum_then_normalize)"
        )
    if combiner.entry.declares(NamesObjectives):  # gated: the names it gives must be objectives
        combiner.params.check_objectives(
            columns + (("overlong_penalty",) if cfg.algorithm.overlong.soft_penalty else ())
        )
    produces = combiner.entry.declares(MayProduceAdvantages) and combiner.params.produces_advantages()
    if produces and estimator.id != "score_as_advantage":
        raise ValueError(
            f"algorithm.reward_combination: {combiner.id!r} with these settings already returns normalised "
            f"advantages; the estimator {estimator.id!r} would normalise them a second time. Set "
            f"algorithm.advantage.id: score_as_advantage (the gdpo preset does), or reward_combination.renormalize: "
            f"none to feed {estimator.id!r}"
        )
    if combiner.entry.needs(Requires.GROUPS) and estimator.entry.needs(Requires.GREEDY_BASELINE):
        raise ValueError(
            f"algorithm.advantage: {estimator.id!r} scores a lone greedy completion per prompt, which the group "
            f"statistics of reward_combination {combiner.id!r} cannot score; use a per-sample combiner "
            f"(sum_then_normalize, gated, ensemble_min, mean_minus_std)"
        )


def _check_group_sizes(cfg: GroveConfig, entries: RunEntries) -> None:
    estimator, group_size = entries.advantage, cfg.train.completions_per_prompt
    if group_size < 2 and estimator.entry.needs(Requires.GROUPS):
        raise ValueError(
            f"train.completions_per_prompt: 1 with algorithm.advantage {estimator.id!r}, which compares each sample "
            "with the other completions of its prompt: with one completion there is none, so no advantage is "
            "group-relative (a lone sample gets its raw score, 0 or an error, depending on the estimator). Set "
            "train.completions_per_prompt >= 2, or choose an estimator that needs no group (reinforce_pp, remax)"
        )
    smallest = estimator.params.min_group_size() if estimator.entry.declares(NeedsLargerGroups) else 1
    if group_size < smallest:
        raise ValueError(
            f"train.completions_per_prompt ({group_size}) is smaller than the groups algorithm.advantage "
            f"{estimator.id!r} takes with these parameters (at least {smallest}); raise it, or lower the estimator's "
            f"parameter (e.g. k)"
        )


def _check_environment_run(cfg: GroveConfig, entries: RunEntries) -> None:
    estimator = entries.advantage
    produced = {entry.id for entry in entries.step_annotators}
    missing = sorted(estimator.entry.step_columns - produced)
    if missing:
        raise ValueError(
            f"algorithm.advantage: {estimator.id!r} reads the step-table columns {missing}, which no step annotator "
            f"produces (registered: {', '.join(sorted(produced))}); register one in STEP_ANNOTATORS"
        )
    e = cfg.env
    if e is None:
        raise ValueError("experience_source: environment needs an `env` section (env.id, env.params, ...)")
    if e.prompt == "conversation" and not cfg.rollout.use_chat_template:
        raise ValueError("env.prompt: conversation needs rollout.use_chat_template: true (token-exact chat turns)")
    a = cfg.algorithm
    if estimator.entry.needs(Requires.GREEDY_BASELINE):
        raise ValueError(
            f"algorithm.advantage: {estimator.id!r} needs a greedy completion per prompt, which environment "
            "episodes do not provide; choose gigpo, episode_grpo, step_discounted_return or an outcome estimator"
        )
    if a.overlong.filter or a.overlong.soft_penalty:
        raise ValueError(
            "algorithm.overlong applies to single-turn completions; for episodes bound turns with env.max_turns "
            "and rollout.max_new_tokens"
        )
    if a.kl.placement == "reward" and estimator.entry.needs(Requires.STEPS):
        raise ValueError(
            "algorithm.kl.placement: reward changes sample scores, which step estimators do not read; use "
            "kl.placement: loss with environment steps"
        )
