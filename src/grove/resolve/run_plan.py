"""The front door: a config checked and resolved once for one kind of run, :func:`resolve` → :class:`RunPlan`.

``grove train``, ``grove sft``, ``grove rm``, ``grove eval``, ``grove config show``, the Python API, the docs generator
and the benchmarks all come through :func:`resolve`. In order, it

1. refuses what the kind of run cannot do with the world it will run in (:mod:`grove.resolve.kind_checks`);
2. imports the config's ``imports`` (the user's own components register there);
3. looks every component the run uses up once (:class:`grove.resolve.component_lookups.ComponentLookups`) and
   validates its parameters: the estimator, the policy loss and loss aggregation (``nll`` and ``token_mean`` for
   ``sft`` and ``rm``), the KL estimator, the reward combiner, each registered reward, the task or the environment
   and its action parser, the experience source, the rollout engine and the step annotators;
4. checks the rules that depend on what the components hold, through their declared capabilities
   (:class:`grove.registry.Requires` and the parameter protocols; :mod:`grove.resolve.component_checks`);
5. with ``preflight`` (every run; off where only the config's own consistency is wanted), resolves the user's code
   and the model's files without loading weights (:mod:`grove.resolve.preflight`): the rewards as the run calls
   them, a user environment factory, ``model.init_from``, the LoRA targets;
6. derives what the rest of the run reads from the components rather than from their ids: :class:`ModelNeeds`, the
   objective names, whether the zero-advantage skip applies, and the algorithm's components
   (:class:`grove.resolve.run_components.RunComponents`).

Every problem is a :class:`grove.config.ConfigError` naming the config key and the fix. Resolving twice changes
nothing; nothing after :func:`resolve` looks a config id up again.
"""

from __future__ import annotations

import errno
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grove.builtin_components  # noqa: F401  (registers every built-in component)
from grove.config import ConfigError, GroveConfig
from grove.config.components import ComponentParamsError, ComponentSpec
from grove.config.reward_columns import reward_column_names
from grove.experience.completion_collection import ObjectiveScoring
from grove.registry import (
    ACTION_PARSERS,
    ADVANTAGE_ESTIMATORS,
    ENVIRONMENTS,
    EXPERIENCE_SOURCES,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    REWARD_COMBINERS,
    REWARD_FUNCTIONS,
    ROLLOUT_ENGINES,
    STEP_ANNOTATORS,
    Entry,
    LoadsModelWeights,
    Requires,
    ScoresSeveralObjectives,
)
from grove.resolve.component_checks import check_components
from grove.resolve.component_lookups import ComponentLookups, Resolved
from grove.resolve.kind_checks import check_kind
from grove.resolve.preflight import preflight
from grove.resolve.run_components import RunComponents, resolve_components
from grove.resolve.run_entries import RunEntries, RunKind
from grove.tasks.task import TASKS

if TYPE_CHECKING:
    from grove.rewards.scoring import RewardSpec

__all__ = ["ModelNeeds", "RunEntries", "RunKind", "RunPlan", "resolve"]

#: the loss a kind of run trains with when it is not the config's algorithm (demonstrations, reward-model rows)
_STORED_EXAMPLE_LOSS = ("nll", "token_mean")


@dataclass(frozen=True)
class ModelNeeds:
    """What the run's models must provide beyond the policy: ``reference``, the reference policy's log-probs (a KL
    term in the loss or the reward, or a policy loss that declares :attr:`grove.registry.Requires.REFERENCE_LOGPROBS`)."""

    reference: bool = False


@dataclass(frozen=True)
class RunPlan:
    """A config resolved for one kind of run (see the module docstring). ``objective_names``: the reward columns,
    in order (each reward's objectives); ``reward_model_bytes``: the weights the rewards load themselves;
    ``skip_zero_advantage_blocker``: why ``train.skip_zero_advantage`` does not apply (``None``: it applies);
    ``rewards``: the rewards as the run calls them (:class:`grove.rewards.scoring.RewardSpec`, resolved by the
    preflight; empty without it)."""

    cfg: GroveConfig
    kind: RunKind
    world_size: int
    entries: RunEntries
    components: RunComponents
    model_needs: ModelNeeds
    objective_names: tuple[str, ...]
    reward_model_bytes: int
    skip_zero_advantage_blocker: str | None
    rewards: tuple[RewardSpec, ...] = ()

    @property
    def scoring(self) -> ObjectiveScoring:
        """How a training step scores its samples: the reward combiner and the greedy baseline."""
        return self.components.scoring

    @property
    def accuracy_reward(self) -> str:
        """The reward column whose 1.0 means correct: ``eval.accuracy_reward``, or the first objective."""
        return self.cfg.eval.accuracy_reward or self.objective_names[0]


def resolve(
    cfg: GroveConfig, kind: RunKind = "train", *, world_size: int = 1, preflight_checks: bool = True
) -> RunPlan:
    """``cfg`` checked and resolved for a run of ``kind`` on ``world_size`` processes (see the module docstring)."""
    _refuse_symlink_loop(Path(cfg.output_dir))
    try:
        check_kind(cfg, kind, world_size)
        _import_user_modules(cfg.imports)
        lookups = ComponentLookups()
        entries = _look_up(cfg, kind, lookups)
        reward_columns = _reward_columns(cfg, entries)
        check_components(cfg, entries, reward_columns)
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"invalid configuration:\n  {exc}") from None
    rewards = tuple(preflight(cfg, entries.rewards)) if preflight_checks else ()
    blocker = _zero_advantage_skip_blocker(cfg, entries)
    return RunPlan(
        cfg=cfg,
        kind=kind,
        world_size=world_size,
        entries=entries,
        components=resolve_components(cfg, entries, skip_zero_advantage=blocker is None),
        model_needs=ModelNeeds(reference=kind == "train" and _needs_reference(cfg, entries)),
        objective_names=tuple(c for columns in reward_columns for c in columns),
        reward_model_bytes=_reward_model_bytes(entries),
        skip_zero_advantage_blocker=blocker,
        rewards=rewards,
    )


def _look_up(cfg: GroveConfig, kind: RunKind, lookups: ComponentLookups) -> RunEntries:
    a = cfg.algorithm
    advantage = lookups.resolved(a.advantage, ADVANTAGE_ESTIMATORS, "algorithm.advantage")
    if kind in ("sft", "rm"):  # the loss of stored examples; the config's algorithm is checked all the same
        lookups.resolved(a.policy_loss, POLICY_LOSSES, "algorithm.policy_loss")
        lookups.entry(LOSS_AGGREGATIONS, a.aggregation, "algorithm.aggregation")
        loss_id, aggregation_id = _STORED_EXAMPLE_LOSS
        policy_loss = lookups.resolved(ComponentSpec(id=loss_id), POLICY_LOSSES, f"the {kind} loss")
        aggregation = lookups.entry(LOSS_AGGREGATIONS, aggregation_id, f"the {kind} loss")
    else:
        policy_loss = lookups.resolved(a.policy_loss, POLICY_LOSSES, "algorithm.policy_loss")
        aggregation = lookups.entry(LOSS_AGGREGATIONS, a.aggregation, "algorithm.aggregation")
    environment = cfg.source_id == "environment"
    task = None if environment else lookups.resolved(cfg.task, TASKS, "task")
    engine = lookups.entry(ROLLOUT_ENGINES, cfg.rollout.engine, "rollout.engine")
    kl_estimator = lookups.entry(KL_ESTIMATORS, a.kl.estimator, "algorithm.kl.estimator")
    rewards = tuple(_reward(lookups, r, i) for i, r in enumerate(cfg.rewards))
    return RunEntries(
        advantage=advantage,
        policy_loss=policy_loss,
        loss_aggregation=aggregation,
        kl_estimator=kl_estimator,
        reward_combiner=lookups.resolved(a.reward_combination, REWARD_COMBINERS, "algorithm.reward_combination"),
        rewards=rewards,
        task=task,
        experience_source=_experience_source(cfg, lookups),
        environment=_environment(cfg, lookups),
        action_parser=(
            lookups.resolved(cfg.env.action_parser, ACTION_PARSERS, "env.action_parser")
            if environment and cfg.env is not None else None
        ),
        rollout_engine=engine,
        step_annotators=tuple(
            lookups.entry(STEP_ANNOTATORS, id, "step annotators") for id in (STEP_ANNOTATORS.ids() if environment else ())
        ),
    )


def _reward(lookups: ComponentLookups, reward: ComponentSpec, index: int) -> Resolved | None:
    if ":" in reward.id:  # a user function by import path: the preflight imports it
        return None
    return lookups.resolved(reward, REWARD_FUNCTIONS, f"rewards.{index}")


def _environment(cfg: GroveConfig, lookups: ComponentLookups) -> Resolved | None:
    e = cfg.env
    if cfg.source_id != "environment" or e is None or ":" in e.id:  # a user factory is built by the preflight
        return None
    if "id" in e.params:
        raise ValueError("env.params: 'id' is not a parameter; the environment is chosen by env.id")
    try:
        return lookups.resolved(ComponentSpec(id=e.id, **e.params), ENVIRONMENTS, "env.params")
    except ComponentParamsError:
        raise
    except ValueError as exc:
        message = str(exc).removeprefix("env.params: ")
        raise ValueError(
            f"env.id: {message}" + ("" if e.id in ENVIRONMENTS else ", or an import path 'package.module:factory'")
        ) from None


def _experience_source(cfg: GroveConfig, lookups: ComponentLookups) -> Entry:
    if cfg.experience_source != "auto" and cfg.experience_source not in EXPERIENCE_SOURCES:
        raise ValueError(
            f"experience_source: unknown source {cfg.experience_source!r}; allowed: auto, "
            f"{', '.join(EXPERIENCE_SOURCES.ids())}"
        )
    return lookups.entry(EXPERIENCE_SOURCES, cfg.source_id, "experience_source")


def _reward_columns(cfg: GroveConfig, entries: RunEntries) -> tuple[tuple[str, ...], ...]:
    """Each reward's columns: the config's ``objectives``, a registered reward's own objectives (parameters that
    declare ``ScoresSeveralObjectives``), a user function's ``objectives`` attribute, else its display name."""
    columns: list[tuple[str, ...]] = []
    for reward, resolved in zip(cfg.rewards, entries.rewards, strict=True):
        if reward.objectives or resolved is None:  # the config's selection, or a user function's own
            columns.append(reward_column_names(reward))
        elif resolved.entry.declares(ScoresSeveralObjectives):
            columns.append(tuple(resolved.params.objective_names()) or (reward.display_name,))
        else:
            columns.append((reward.display_name,))
    return tuple(columns)


def _needs_reference(cfg: GroveConfig, entries: RunEntries) -> bool:
    return cfg.algorithm.kl.coef > 0 or Requires.REFERENCE_LOGPROBS in entries.policy_loss.entry.requires


def _reward_model_bytes(entries: RunEntries) -> int:
    """The weights of the models the rewards load themselves (parameters declaring ``LoadsModelWeights``)."""
    return sum(
        r.params.model_bytes() for r in entries.rewards if r is not None and r.entry.declares(LoadsModelWeights)
    )


def _zero_advantage_skip_blocker(cfg: GroveConfig, entries: RunEntries) -> str | None:
    """Why ``train.skip_zero_advantage`` does not apply to this run (``None``: it applies).

    Leaving zero-advantage samples out of the update must change no gradient and no input of a controller: the
    policy loss and the aggregation must declare it (``zero_advantage_rows_skippable``: row-local and vanishing with
    the advantage; a sum of per-row terms over global counts), there must be no KL term in the loss, no entropy bonus
    or entropy target (whose controller reads the update's entropy), and no D^3S token selection across several
    samples (scopes ``micro_batch`` and ``batch`` rank their tokens together; scope ``sequence`` ranks within each
    completion, keeps a count known before the forward, and a zero-advantage sample's kept tokens have a zero
    gradient). ``grove config show`` prints the answer."""
    a = cfg.algorithm
    if not cfg.train.skip_zero_advantage:
        return "train.skip_zero_advantage is false"
    if not entries.policy_loss.entry.zero_advantage_rows_skippable:
        return f"the policy loss {entries.policy_loss.id!r} does not declare zero_advantage_rows_skippable"
    if not entries.loss_aggregation.zero_advantage_rows_skippable:
        return f"the aggregation {entries.loss_aggregation.id!r} does not declare zero_advantage_rows_skippable"
    if a.kl.coef > 0 and a.kl.placement == "loss":
        return "the KL term in the loss has a gradient whatever the advantage (algorithm.kl)"
    if a.entropy.coef != 0 or a.entropy.target is not None:
        return "an entropy bonus or target reads every sample's entropy (algorithm.entropy)"
    if cfg.selection.tokens is not None and cfg.selection.tokens.scope != "sequence":
        return (f"D^3S token selection with scope {cfg.selection.tokens.scope!r} ranks the tokens of several samples "
                "together (selection.tokens.scope: sequence ranks within each completion and allows the skip)")
    return None


def _import_user_modules(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except (ImportError, ValueError, TypeError) as exc:  # ValueError: '', TypeError: a relative name
            raise ValueError(
                f"imports: cannot import {module!r} ({exc}); it must be importable from the working "
                "directory or PYTHONPATH"
            ) from None


def _refuse_symlink_loop(output_dir: Path) -> None:
    """A :class:`ConfigError` when ``output_dir`` or one of its parents is a symlink loop (it cannot be created)."""
    for candidate in (*reversed(output_dir.parents), output_dir):
        try:
            os.stat(candidate)
        except OSError as exc:  # a missing part is created by the run; an unreadable one is reported when written
            if exc.errno == errno.ELOOP:
                raise ConfigError(
                    f"output_dir: {str(candidate)!r} is a symlink loop (its links lead back to each other), so "
                    f"{str(output_dir)!r} cannot be created; remove the link, or choose another with --set "
                    "output_dir=..."
                ) from None
            return
