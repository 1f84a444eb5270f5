"""Resolve reward functions from config, compute them on a batch, and combine them.

A reward in the config is either a registry id (``answer_match``) with parameters, or a user function
given by import path (``mypkg.rewards:my_fn``). Either way it becomes a :class:`RewardSpec` holding a
plain TRL-style callable ``fn(prompts, completions, **columns) -> list[float | None]``.

User reward contract
--------------------
* Called with keyword arguments ``prompts=[...]``, ``completions=[...]`` and one keyword per dataset
  column (lists aligned with ``completions``). Accept ``**kwargs`` to ignore columns you do not use.
* Return one value per completion: a real number, or ``None`` when the reward does not apply to that
  sample (it is then left out of the weighted sum for that sample). NaN and ±inf are rejected: return
  ``None`` instead of NaN.
* A reward may score several *objectives* in one call (one clinical checker, not K): it declares their
  names (the ``objectives`` key of its config block, a ``fn.objectives`` attribute, or — for a registered
  reward — its params model's ``objective_names()``) and returns per sample a dict
  ``{objective: value | None}`` or a row of values in that order (a list of lists or an ``[n, k]`` array).
  Each objective becomes a column of the reward matrix with weight ``weight × objective_weights[name]``.
* Exceptions are not swallowed: they are re-raised as :class:`RewardFunctionError` naming the reward,
  the training step, the failing sample and a truncated prompt/completion.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ValidationError

from grove.registry import REWARD_FUNCTIONS, import_callable
from grove.rewards.values import RewardValueError, value_rows

RewardFn = Callable[..., Sequence[float | None]]

_PREVIEW_CHARS = 200


class RewardLoadError(ValueError):
    """A reward id / import path could not be resolved, or its parameters are invalid."""


class RewardFunctionError(RuntimeError):
    """A reward function raised, or returned something malformed, while scoring a batch."""


@dataclass(frozen=True)
class RewardSpec:
    """One configured reward: display name, bound TRL-style callable and weight in the sum.

    ``objectives`` (when set) are the names of the columns a multi-objective reward returns, and
    ``objective_weights`` their weights (default: ``weight`` each).
    """

    name: str
    fn: RewardFn
    weight: float
    objectives: tuple[str, ...] | None = None
    objective_weights: tuple[float, ...] | None = None
    unselected: frozenset[str] = frozenset()  # objectives the reward returns that the config left out

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


def bind_reward(id: str, params: Mapping[str, Any] | BaseModel | None = None) -> RewardFn:
    """Bind a registered reward's ``params`` and return ``f(prompts, completions, **columns)``.

    ``params`` is validated against the reward's pydantic model (a model instance is re-validated
    from its fields). The returned callable has ``__name__ == id`` (TRL logs rewards by ``__name__``)
    and exposes the validated model as ``.params``.
    """
    entry = REWARD_FUNCTIONS.entry(id)
    values = params.model_dump() if isinstance(params, BaseModel) else dict(params or {})
    validated = REWARD_FUNCTIONS.validate_params(id, values)
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
    """The objective names (declared in the config, else by the function or its params) and their weights."""
    own = _own_objectives(fn)
    names = tuple(declared) if declared else (tuple(own) if own else None)
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

    Raises:
        RewardLoadError: unknown id, unimportable module, missing/non-callable attribute, params given
            to a user function, invalid params, or a non-finite weight.
    """
    if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
        raise RewardLoadError(f"reward {id_or_path!r}: weight must be a finite number, got {weight!r}")
    if ":" in id_or_path:
        if params:
            raise RewardLoadError(
                f"reward {id_or_path!r} is a user function and takes no params; got "
                f"{', '.join(sorted(params))}. Bind them in your own code (e.g. functools.partial "
                f"inside your module) instead"
            )
        fn = _import_callable(id_or_path)
        display = name or getattr(fn, "__name__", None) or id_or_path
        names, weights = _objectives(id_or_path, fn, objectives, float(weight), objective_weights)
        return RewardSpec(display, fn, float(weight), names, weights, _unselected(fn, names))
    if id_or_path not in REWARD_FUNCTIONS:
        hint = " (user functions need a colon: 'package.module:function')" if "." in id_or_path else ""
        raise RewardLoadError(
            f"unknown reward function {id_or_path!r}{hint}; known: {', '.join(REWARD_FUNCTIONS.ids())}"
        )
    try:
        fn = bind_reward(id_or_path, params)
    except ValidationError as e:
        raise RewardLoadError(f"invalid params for reward {id_or_path!r}: {e}") from e
    names, weights = _objectives(id_or_path, fn, objectives, float(weight), objective_weights)
    return RewardSpec(name or id_or_path, fn, float(weight), names, weights, _unselected(fn, names))


def _unselected(fn: Any, names: tuple[str, ...] | None) -> frozenset[str]:
    """The objectives a reward declares itself that ``names`` (the config's selection) leaves out."""
    return frozenset(_own_objectives(fn) or ()) - frozenset(names or ())


def _own_objectives(fn: Any) -> tuple[str, ...] | None:
    """The objective names a reward declares itself: its params' ``objective_names()`` (registered rewards) or its
    ``objectives`` attribute (user functions); None for a single-objective reward."""
    params = getattr(fn, "params", None)
    own = params.objective_names() if hasattr(params, "objective_names") else getattr(fn, "objectives", None)
    return tuple(own) if own else None


def resolve_rewards(configs: Sequence[Any]) -> list[RewardSpec]:
    """One :class:`RewardSpec` per ``rewards:`` block of the config (``id``, params, ``weight``, ``display_name``,
    ``objectives``, ``objective_weights``); the column names are checked to be unique."""
    specs = [
        resolve_reward(
            r.id, r.params, r.weight, r.display_name, getattr(r, "objectives", None), getattr(r, "objective_weights", None)
        )
        for r in configs
    ]
    reward_columns(specs)
    return specs


def _preview(value: Any, limit: int = _PREVIEW_CHARS) -> str:
    """Short repr of a prompt (string or chat messages) or completion for error messages."""
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        value = f"[{len(value)} messages; last {value[-1].get('role', '?')}] {value[-1]['content']}"
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[: limit // 2] + f" …[{len(text) - limit} chars]… " + text[-limit // 2 :]
    return repr(text)


def _sample_detail(prompts: Sequence[Any], completions: Sequence[str], i: int) -> str:
    return f"prompt={_preview(prompts[i])}, completion={_preview(completions[i])}"


def _call(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], columns: Mapping[str, list]
) -> Any:
    return spec.fn(prompts=list(prompts), completions=list(completions), **columns)


def _locate_failure(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], columns: Mapping[str, list]
) -> tuple[int, BaseException] | None:
    """Re-run a failed reward one sample at a time to find the first failing sample."""
    for i in range(len(completions)):
        try:
            _call(
                spec,
                prompts[i : i + 1],
                completions[i : i + 1],
                {k: v[i : i + 1] for k, v in columns.items()},
            )
        except Exception as e:  # noqa: BLE001 - we are locating the error to re-raise it with context
            return i, e
    return None


def compute_rewards(
    specs: Sequence[RewardSpec],
    prompts: Sequence[Any],
    completions: Sequence[str],
    columns: Mapping[str, Sequence[Any]],
    *,
    step: int,
) -> torch.Tensor:
    """Score ``N`` completions: a float32 tensor ``[N, K]``, one column per objective (a single-objective reward
    is one column; see :func:`reward_columns` for the names and weights); ``None`` becomes NaN.

    Each reward is called once on the whole batch as ``fn(prompts=..., completions=..., **columns)``.

    Raises:
        ValueError: misaligned inputs (prompt/column lengths differ from ``len(completions)``) or a
            column named ``prompts``/``completions``.
        RewardFunctionError: a reward raised (the batch is then re-scored one sample at a time to
            name the first failing sample; a reward that fails only on the whole batch is reported
            as such), returned the wrong number of values, or returned a non-number / NaN / inf.
    """
    n = len(completions)
    if len(prompts) != n:
        raise ValueError(f"compute_rewards: {len(prompts)} prompts for {n} completions")
    cols: dict[str, list] = {}
    for key, values in columns.items():
        if key in ("prompts", "completions"):
            raise ValueError(f"compute_rewards: dataset column {key!r} clashes with a reward argument name")
        values = list(values)
        if len(values) != n:
            raise ValueError(f"compute_rewards: column {key!r} has {len(values)} values for {n} completions")
        cols[key] = values

    columns_out: list[list[list[float]]] = []
    for spec in specs:
        where = f"reward {spec.name!r} at step {step}"
        try:
            values = _call(spec, prompts, completions, cols)
        except Exception as batch_error:
            located = _locate_failure(spec, prompts, completions, cols)
            if located is None:
                raise RewardFunctionError(
                    f"{where} raised on the batch of {n} samples (but on no single sample): "
                    f"{type(batch_error).__name__}: {batch_error}; first sample: "
                    f"{_sample_detail(prompts, completions, 0) if n else '(empty batch)'}"
                ) from batch_error
            i, error = located
            raise RewardFunctionError(
                f"{where} raised on sample {i}: {type(error).__name__}: {error}; "
                f"{_sample_detail(prompts, completions, i)}"
            ) from error
        try:
            rows = value_rows(
                values, n, spec.objectives, lambda i: _sample_detail(prompts, completions, i), spec.unselected
            )
        except RewardValueError as e:
            raise RewardFunctionError(f"{where} {e}") from None
        columns_out.append(rows)
    width = sum(len(s.columns) for s in specs)
    if not n or not width:
        return torch.empty(n, width, dtype=torch.float32)
    return torch.tensor([[v for rows in columns_out for v in rows[i]] for i in range(n)], dtype=torch.float32)
