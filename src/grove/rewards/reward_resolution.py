"""From a ``rewards:`` config block to a :class:`RewardSpec`: a registry id with parameters or a user function by
import path, bound to a plain TRL-style callable, with its objectives, weights and failure settings
(``on_error``, ``isolation``, ``timeout_s``: the worker process is created here, started at the first call).
Scoring the specs on a batch is :mod:`grove.rewards.scoring`.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from grove.infra.reward_workers import RewardWorker, pickled_reward
from grove.python_objects import is_python_reference
from grove.registry import REWARD_FUNCTIONS, Entry, ScoresSeveralObjectives, WeighsObjectives, import_callable

RewardFn = Callable[..., Sequence[float | None]]
OnError = Literal["raise", "zero", "skip"]
Isolation = Literal["none", "process"]


class RewardLoadError(ValueError):
    """A reward id / import path could not be resolved, or its parameters are invalid."""


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something malformed, while scoring a batch."""


@dataclass(frozen=True)
class RewardSpec:
    """One configured reward: display name, bound TRL-style callable and weight in the sum.

    ``objectives`` (when set) are the names of the columns a multi-objective reward returns, and
    ``objective_weights`` their weights (default: ``weight`` each). ``on_error``, ``isolation`` and ``timeout_s``:
    see the module docstring; ``worker`` is the reward's worker process under ``isolation: process``.
    """

    name: str
    fn: RewardFn
    weight: float
    objectives: tuple[str, ...] | None = None
    objective_weights: tuple[float, ...] | None = None
    unselected: frozenset[str] = frozenset()  # objectives the reward returns that the config left out
    on_error: OnError = "raise"
    isolation: Isolation = "none"
    timeout_s: float | None = None
    worker: RewardWorker | None = field(default=None, compare=False, repr=False)
    # run state: whether this reward's first failure and first failed batch call have been logged (once per run,
    # i.e. per resolved spec)
    _failure_logged: list[bool] = field(default_factory=lambda: [False], init=False, compare=False, repr=False)
    _batch_retry_logged: list[bool] = field(default_factory=lambda: [False], init=False, compare=False, repr=False)

    @property
    def tolerant(self) -> bool:
        """Not today's default (raise in the trainer's process): failures are handled and counted."""
        return self.on_error != "raise" or self.isolation != "none"

    @property
    def columns(self) -> tuple[str, ...]:
        """The reward-matrix columns this reward fills: its objectives, or its own name."""
        return self.objectives if self.objectives is not None else (self.name,)

    @property
    def column_weights(self) -> tuple[float, ...]:
        if self.objective_weights is not None:
            return self.objective_weights
        return (self.weight,) * len(self.columns)


def reward_columns(specs: Sequence[RewardSpec]) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The names and weights of the reward matrix's columns (every objective of every reward, in order).

    Raises:
        RewardLoadError: two columns share a name (rename a reward with ``name:``).
    """
    names = tuple(c for s in specs for c in s.columns)
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RewardLoadError(
                f"rewards: the objective/reward name {name!r} appears twice; give one reward a different 'name'"
            )
        seen.add(name)
    return names, tuple(w for s in specs for w in s.column_weights)


def bind_reward(id: str, params: Mapping[str, Any] | BaseModel | None = None, *, entry: Entry | None = None) -> RewardFn:
    """Bind a registered reward's ``params`` and return ``f(prompts, completions, **columns)``.

    ``params`` is validated against the reward's pydantic model (a model instance is re-validated
    from its fields). The returned callable has ``__name__ == id`` (TRL logs rewards by ``__name__``)
    and exposes the validated model as ``.params``. ``entry``: the reward's registry entry, when the caller has
    looked it up already.
    """
    entry = entry or REWARD_FUNCTIONS.entry(id)
    values = params.model_dump() if isinstance(params, BaseModel) else dict(params or {})
    validated = entry.params.model_validate(values)
    registered = entry.fn

    def reward(prompts: Sequence[Any], completions: Sequence[str], **columns: Any) -> list[float | None]:
        return registered(prompts, completions, params=validated, **columns)

    reward.__name__ = reward.__qualname__ = id
    reward.__doc__ = registered.__doc__
    reward.params = validated  # type: ignore[attr-defined]
    if hasattr(validated, "evaluation_summary"):  # held-out headline numbers computed from the whole column block
        reward.evaluation_summary = validated.evaluation_summary  # type: ignore[attr-defined]
    return reward


def _import_callable(path: str) -> Callable[..., Any]:
    return import_callable(path, "reward", RewardLoadError)


def _objectives(
    id_or_path: str,
    fn: Any,
    declared: Sequence[str] | None,
    weight: float,
    objective_weights: Mapping[str, float] | None,
) -> tuple[tuple[str, ...] | None, tuple[float, ...] | None]:
    """The objective names (declared in the config, else by the function or its params) and their weights (the
    params' own defaults where they declare them, :class:`WeighsObjectives`, each overridden by the config's
    ``objective_weights``; else the config's, 1 where it names none)."""
    own = _own_objectives(fn)
    names = tuple(declared) if declared else (tuple(own) if own else None)
    params = getattr(fn, "params", None)
    if names is not None and isinstance(params, WeighsObjectives):  # the config's weights override its defaults
        defaults = {k: v for k, v in params.objective_weights().items() if k in names}
        objective_weights = {**defaults, **(objective_weights or {})}
    if names is not None:
        if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise RewardLoadError(f"reward {id_or_path!r}: objective names must be distinct strings, got {list(names)}")
        if own and declared and not set(declared) <= set(own):
            raise RewardLoadError(
                f"reward {id_or_path!r}: objectives {sorted(set(declared) - set(own))} are not produced by it; "
                f"it produces: {', '.join(own)}"
            )
    if objective_weights:
        if names is None:
            raise RewardLoadError(
                f"reward {id_or_path!r}: objective_weights given but the reward declares no objectives "
                f"(set 'objectives: [...]' to the names it returns)"
            )
        unknown = sorted(set(objective_weights) - set(names))
        if unknown:
            raise RewardLoadError(
                f"reward {id_or_path!r}: objective_weights names {unknown} are not objectives; objectives: {', '.join(names)}"
            )
        for key, value in objective_weights.items():
            if not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise RewardLoadError(f"reward {id_or_path!r}: objective_weights.{key} must be a finite number")
    if names is None:
        return None, None
    extra = objective_weights or {}
    return names, tuple(weight * float(extra.get(n, 1.0)) for n in names)


def resolve_reward(
    id_or_path: str,
    params: Mapping[str, Any] | None = None,
    weight: float = 1.0,
    name: str | None = None,
    objectives: Sequence[str] | None = None,
    objective_weights: Mapping[str, float] | None = None,
    *,
    on_error: OnError = "raise",
    isolation: Isolation = "none",
    timeout_s: float | None = None,
    entry: Entry | None = None,
) -> RewardSpec:
    """Build a :class:`RewardSpec` from a registry id or a ``package.module:function`` import path.

    Args:
        id_or_path: a registered reward id (see ``REWARD_FUNCTIONS.ids()``) or an import path with a
            colon, e.g. ``"mypkg.rewards:my_fn"`` (``"mod:Class.method"`` also works).
        params: parameters for a registry reward, validated against its pydantic model. User
            functions take no params: passing a non-empty ``params`` for one is an error.
        weight: weight of this reward in the combined reward (finite; 0 means "log only").
        name: display name; defaults to the registry id, or the user function's ``__name__``.
        objectives: the objective names a multi-objective reward returns (default: the function's
            ``objectives`` attribute or its params' ``objective_names()``; a registered reward may be
            restricted to a subset).
        objective_weights: per-objective factors multiplying ``weight`` (default 1 each).
        on_error: what a sample the reward fails on gets: ``"raise"`` (stop with :class:`RewardFunctionError`),
            ``"zero"`` (0.0) or ``"skip"`` (NaN: the reward does not apply to it).
        isolation: ``"process"``: call the reward in its own worker process (crash-proof, can be timed out).
        timeout_s: per-call time limit (needs ``isolation="process"``).
        entry: the registered reward's entry, when the caller has looked it up already (the run's front door).

    Raises:
        RewardLoadError: unknown id, unimportable module, missing/non-callable attribute, params given
            to a user function, invalid params, a non-finite weight, bad failure settings, or (with
            ``isolation="process"``) a reward that cannot be pickled by reference for its worker.
    """
    if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
        raise RewardLoadError(f"reward {id_or_path!r}: weight must be a finite number, got {weight!r}")
    _check_failure_settings(id_or_path, on_error, isolation, timeout_s)
    settings: dict[str, Any] = {
        "on_error": on_error, "isolation": isolation, "timeout_s": None if timeout_s is None else float(timeout_s)
    }
    if ":" in id_or_path:
        if isolation == "process" and is_python_reference(id_or_path):
            raise RewardLoadError(
                f"reward {id_or_path!r}: isolation 'process' runs the reward in a worker process, which imports it, "
                f"and a function handed over from a notebook or a script's __main__ cannot be imported there; define "
                f"it at module level in an importable module (then it is named by import path), or use isolation: none"
            )
        if params:
            raise RewardLoadError(
                f"reward {id_or_path!r} is a user function and takes no params; got "
                f"{', '.join(sorted(params))}. Bind them in your own code (e.g. functools.partial "
                f"inside your module) instead"
            )
        fn = _import_callable(id_or_path)
        display = name or getattr(fn, "__name__", None) or id_or_path
        names, weights = _objectives(id_or_path, fn, objectives, float(weight), objective_weights)
        worker = _worker(id_or_path, display, fn) if isolation == "process" else None
        return RewardSpec(display, fn, float(weight), names, weights, _unselected(fn, names), **settings, worker=worker)
    if entry is None and id_or_path not in REWARD_FUNCTIONS:
        hint = " (user functions need a colon: 'package.module:function')" if "." in id_or_path else ""
        raise RewardLoadError(
            f"unknown reward function {id_or_path!r}{hint}; known: {', '.join(REWARD_FUNCTIONS.ids())}"
        )
    try:
        entry = entry or REWARD_FUNCTIONS.entry(id_or_path)
        fn = bind_reward(id_or_path, params, entry=entry)
    except ValidationError as e:
        raise RewardLoadError(f"invalid params for reward {id_or_path!r}: {e}") from e
    names, weights = _objectives(id_or_path, fn, objectives, float(weight), objective_weights)
    worker = None
    if isolation == "process":  # the worker gets the registered function and its params, not bind_reward's closure
        target = functools.partial(entry.fn, params=fn.params)  # type: ignore[attr-defined]
        worker = _worker(id_or_path, name or id_or_path, target)
    return RewardSpec(
        name or id_or_path, fn, float(weight), names, weights, _unselected(fn, names), **settings, worker=worker
    )


def _check_failure_settings(id_or_path: str, on_error: Any, isolation: Any, timeout_s: Any) -> None:
    if on_error not in ("raise", "zero", "skip"):
        raise RewardLoadError(f"reward {id_or_path!r}: on_error must be 'raise', 'zero' or 'skip', got {on_error!r}")
    if isolation not in ("none", "process"):
        raise RewardLoadError(f"reward {id_or_path!r}: isolation must be 'none' or 'process', got {isolation!r}")
    if timeout_s is not None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, numbers.Real) or not timeout_s > 0:
            raise RewardLoadError(f"reward {id_or_path!r}: timeout_s must be a positive number, got {timeout_s!r}")
        if isolation != "process":
            raise RewardLoadError(
                f"reward {id_or_path!r}: timeout_s needs isolation 'process' (a reward running in the trainer's "
                f"process cannot be stopped); set isolation: process, or remove timeout_s"
            )


def _worker(id_or_path: str, name: str, target: Any) -> RewardWorker:
    """The (not yet started) worker of a reward under ``isolation: process``; the reward must pickle by reference."""
    try:
        payload = pickled_reward(target)
    except Exception as e:  # noqa: BLE001 - pickle raises PicklingError, TypeError or AttributeError
        raise RewardLoadError(
            f"reward {id_or_path!r}: isolation 'process' needs a reward the worker process can import, i.e. a "
            f"module-level function given by import path ('package.module:function'); this one cannot be pickled "
            f"({type(e).__name__}: {e}). Use isolation: none, or move the function to module level"
        ) from e
    return RewardWorker(name, payload)


def _unselected(fn: Any, names: tuple[str, ...] | None) -> frozenset[str]:
    """The objectives a reward declares itself that ``names`` (the config's selection) leaves out."""
    return frozenset(_own_objectives(fn) or ()) - frozenset(names or ())


def _own_objectives(fn: Any) -> tuple[str, ...] | None:
    """The objective names a reward declares itself: its params' ``objective_names()`` (registered rewards) or its
    ``objectives`` attribute (user functions); None for a single-objective reward."""
    params = getattr(fn, "params", None)
    several = isinstance(params, ScoresSeveralObjectives)
    own = params.objective_names() if several else getattr(fn, "objectives", None)
    return tuple(own) if own else None


def resolve_rewards(configs: Sequence[Any], entries: Sequence[Entry | None] | None = None) -> list[RewardSpec]:
    """One :class:`RewardSpec` per ``rewards:`` block of the config (``id``, params, ``weight``, ``display_name``,
    ``objectives``, ``objective_weights``, ``on_error``, ``isolation``, ``timeout_s``); the column names are
    checked to be unique. ``entries``: each block's registry entry where the caller looked it up (``None`` for a
    user function)."""
    entries = list(entries) if entries is not None else [None] * len(configs)
    specs = [
        resolve_reward(
            r.id,
            r.params,
            r.weight,
            r.display_name,
            getattr(r, "objectives", None),
            getattr(r, "objective_weights", None),
            on_error=getattr(r, "on_error", "raise"),
            isolation=getattr(r, "isolation", "none"),
            timeout_s=getattr(r, "timeout_s", None),
            entry=entry,
        )
        for r, entry in zip(configs, entries, strict=True)
    ]
    reward_columns(specs)
    return specs
