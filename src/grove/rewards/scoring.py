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
* Exceptions are not swallowed (``on_error: raise``, the default): they are re-raised as
  :class:`RewardFunctionError` naming the reward, the training step, the failing sample and a truncated
  prompt/completion.

Failures, hangs and crashes (per reward: ``on_error``, ``isolation``, ``timeout_s``)
-------------------------------------------------------------------------------
* ``on_error: zero`` / ``skip``: a sample the reward raised on (or returned a malformed / NaN / inf value for)
  gets 0.0 / NaN ("does not apply") in the reward's columns instead of stopping the run. The batch call failed,
  the batch is re-scored one sample at a time so only the failing samples get the fallback. Failed samples,
  timeouts and worker restarts are counted into ``stats`` (``reward_errors/<name>``, ``reward_timeouts/<name>``,
  ``reward_worker_restarts/<name>``); each reward's first failure is logged once, with its traceback, on the
  ``grove.rewards`` logger.
* ``isolation: process``: the reward runs in its own long-lived worker process
  (:mod:`grove.rewards.reward_workers`), so a segfault or ``os._exit`` kills only the worker (restarted for the
  next call), and ``timeout_s`` can cut a hanging call off (the worker is killed). A batch call that timed out
  fails as a whole (its samples are not re-run one by one: a hang would cost ``timeout_s`` per sample); a batch
  call that raised or crashed the worker is re-scored sample by sample in the worker, each call with the limit.
"""

from __future__ import annotations

import functools
import logging
import math
import numbers
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from pydantic import BaseModel, ValidationError

from grove.registry import REWARD_FUNCTIONS, import_callable
from grove.rewards.reward_workers import (
    RemoteRewardError,
    RewardCallTimeout,
    RewardWorker,
    RewardWorkerDied,
    RewardWorkerError,
    RewardWorkerStartError,
    pickled_reward,
)
from grove.rewards.values import RewardValueError, value_rows

RewardFn = Callable[..., Sequence[float | None]]
OnError = Literal["raise", "zero", "skip"]
Isolation = Literal["none", "process"]

_PREVIEW_CHARS = 200

log = logging.getLogger("grove.rewards")


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
    # run state: whether this reward's first failure has been logged (once per run, i.e. per resolved spec)
    _failure_logged: list[bool] = field(default_factory=lambda: [False], init=False, compare=False, repr=False)

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
    *,
    on_error: OnError = "raise",
    isolation: Isolation = "none",
    timeout_s: float | None = None,
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
    worker = None
    if isolation == "process":  # the worker gets the registered function and its params, not bind_reward's closure
        target = functools.partial(REWARD_FUNCTIONS.entry(id_or_path).fn, params=fn.params)  # type: ignore[attr-defined]
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
    own = params.objective_names() if hasattr(params, "objective_names") else getattr(fn, "objectives", None)
    return tuple(own) if own else None


def resolve_rewards(configs: Sequence[Any]) -> list[RewardSpec]:
    """One :class:`RewardSpec` per ``rewards:`` block of the config (``id``, params, ``weight``, ``display_name``,
    ``objectives``, ``objective_weights``, ``on_error``, ``isolation``, ``timeout_s``); the column names are
    checked to be unique."""
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
    if spec.worker is not None:  # isolation: process
        kwargs = {"prompts": list(prompts), "completions": list(completions), **columns}
        return spec.worker.call(kwargs, spec.timeout_s)
    return spec.fn(prompts=list(prompts), completions=list(completions), **columns)


def _call_one(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], columns: Mapping[str, list], i: int
) -> Any:
    return _call(spec, prompts[i : i + 1], completions[i : i + 1], {k: v[i : i + 1] for k, v in columns.items()})


def _describe(error: BaseException) -> str:
    """``"Type: message"`` of a reward's exception (the reward's own type for one raised in a worker)."""
    if isinstance(error, RewardWorkerError):  # already "Type: message" / "timed out after ..." / "worker ... died"
        return str(error)
    return f"{type(error).__name__}: {error}"


def _locate_failure(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], columns: Mapping[str, list]
) -> tuple[int, BaseException] | None:
    """Re-run a failed reward one sample at a time to find the first failing sample."""
    for i in range(len(completions)):
        try:
            _call_one(spec, prompts, completions, columns, i)
        except RewardWorkerStartError:
            raise
        except Exception as e:  # noqa: BLE001 - we are locating the error to re-raise it with context
            return i, e
    return None


def _score_strict(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], cols: Mapping[str, list], where: str
) -> list[list[float]]:
    """``on_error: raise``: the reward's rows, or :class:`RewardFunctionError` naming the first failing sample."""
    n = len(completions)
    try:
        values = _call(spec, prompts, completions, cols)
    except RewardWorkerStartError as e:
        raise RewardFunctionError(f"{where}: {e}") from e
    except (RewardCallTimeout, RewardWorkerDied) as e:
        raise RewardFunctionError(
            f"{where} failed on the batch of {n} samples: {e} (isolation: process; a fresh worker is started for "
            f"the next call; set on_error: zero or skip to go on without these samples)"
        ) from e
    except Exception as batch_error:
        try:
            located = _locate_failure(spec, prompts, completions, cols)
        except RewardWorkerStartError as e:
            raise RewardFunctionError(f"{where}: {e}") from e
        if located is None:
            raise RewardFunctionError(
                f"{where} raised on the batch of {n} samples (but on no single sample): "
                f"{_describe(batch_error)}; first sample: "
                f"{_sample_detail(prompts, completions, 0) if n else '(empty batch)'}"
            ) from batch_error
        i, error = located
        raise RewardFunctionError(
            f"{where} raised on sample {i}: {_describe(error)}; "
            f"{_sample_detail(prompts, completions, i)}"
        ) from error
    try:
        return value_rows(values, n, spec.objectives, lambda i: _sample_detail(prompts, completions, i), spec.unselected)
    except RewardValueError as e:
        raise RewardFunctionError(f"{where} {e}") from None


@dataclass
class _Failures:
    """What went wrong while one reward scored one batch: failed samples (index → reason), timed-out calls, and
    the first failure's traceback (for the once-per-run log)."""

    samples: dict[int, str] = field(default_factory=dict)
    timeouts: int = 0
    first_traceback: str = ""

    def add(self, i: int, reason: str, error: BaseException | None = None) -> None:
        self.samples.setdefault(i, reason)
        if isinstance(error, RewardCallTimeout):
            self.timeouts += 1
        if len(self.samples) == 1 and not self.first_traceback and error is not None:
            if isinstance(error, RemoteRewardError):
                self.first_traceback = error.remote_traceback
            elif not isinstance(error, RewardWorkerError):
                self.first_traceback = "".join(traceback.format_exception(error))


def _value_row(spec: RewardSpec, values: Any, detail: str) -> list[float]:
    """One sample's row from what a call on that one sample returned; raises :class:`RewardValueError`."""
    return value_rows(values, 1, spec.objectives, lambda _: detail, spec.unselected)[0]


def _score_each(
    spec: RewardSpec,
    prompts: Sequence[Any],
    completions: Sequence[str],
    cols: Mapping[str, list],
    fallback: list[float],
    failures: _Failures,
) -> list[list[float]]:
    """Re-score one sample per call (in the worker under isolation, each call with the time limit)."""
    rows = []
    for i in range(len(completions)):
        detail = _sample_detail(prompts, completions, i)
        try:
            rows.append(_value_row(spec, _call_one(spec, prompts, completions, cols, i), detail))
        except RewardWorkerStartError:
            raise
        except RewardValueError as e:
            failures.add(i, str(e).replace("for sample 0:", f"for sample {i}:", 1))
            rows.append(list(fallback))
        except Exception as e:  # noqa: BLE001 - on_error zero/skip: the sample gets the fallback
            failures.add(i, f"raised on sample {i}: {_describe(e)}; {detail}", e)
            rows.append(list(fallback))
    return rows


def _score_tolerant(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], cols: Mapping[str, list], where: str
) -> tuple[list[list[float]], _Failures]:
    """``on_error: zero | skip``: the reward's rows, failing samples given 0.0 / NaN, and what failed."""
    n = len(completions)
    fallback = [0.0 if spec.on_error == "zero" else math.nan] * len(spec.columns)
    failures = _Failures()
    try:
        try:
            values = _call(spec, prompts, completions, cols)
        except RewardCallTimeout as e:  # the whole batch fails: re-running a hang per sample would cost n × timeout_s
            for i in range(n):
                failures.add(i, f"{e} on the batch of {n} samples")
            failures.timeouts = 1
            return [list(fallback) for _ in range(n)], failures
        except RewardWorkerStartError:
            raise
        except Exception:  # noqa: BLE001 - raised, or the worker died: find the failing samples
            return _score_each(spec, prompts, completions, cols, fallback, failures), failures
        try:
            return value_rows(
                values, n, spec.objectives, lambda i: _sample_detail(prompts, completions, i), spec.unselected
            ), failures
        except RewardValueError:
            pass
        listed = values.tolist() if hasattr(values, "tolist") and not isinstance(values, list | tuple) else values
        if not isinstance(listed, list | tuple) or len(listed) != n:  # malformed as a whole: one sample per call
            return _score_each(spec, prompts, completions, cols, fallback, failures), failures
        rows = []
        for i, value in enumerate(listed):  # only the bad values fail
            try:
                rows.append(_value_row(spec, [value], _sample_detail(prompts, completions, i)))
            except RewardValueError as e:
                failures.add(i, str(e).replace("for sample 0:", f"for sample {i}:", 1))
                rows.append(list(fallback))
        return rows, failures
    except RewardWorkerStartError as e:
        raise RewardFunctionError(f"{where}: {e}") from e


def _report(spec: RewardSpec, failures: _Failures, where: str, n: int) -> None:
    """Log a reward's first failure of the run, with its traceback; later ones are only counted."""
    if not failures.samples or spec._failure_logged[0]:
        return
    spec._failure_logged[0] = True
    gets = "0.0" if spec.on_error == "zero" else "NaN (skipped: the reward does not apply to them)"
    first = failures.samples[min(failures.samples)]
    log.warning(
        "%s failed on %d of %d samples (first: %s); on_error=%s: they get %s and the run goes on. Later failures "
        "of this reward are only counted (metrics reward_errors/%s, reward_timeouts/%s).%s",
        where, len(failures.samples), n, first, spec.on_error, gets, spec.name, spec.name,
        f"\n{failures.first_traceback.rstrip()}" if failures.first_traceback else "",
    )


def _add(stats: dict[str, float] | None, key: str, value: float) -> None:
    if stats is not None:
        stats[key] = stats.get(key, 0.0) + float(value)


def compute_rewards(
    specs: Sequence[RewardSpec],
    prompts: Sequence[Any],
    completions: Sequence[str],
    columns: Mapping[str, Sequence[Any]],
    *,
    step: int,
    stats: dict[str, float] | None = None,
    skipped: set[int] | None = None,
) -> torch.Tensor:
    """Score ``N`` completions: a float32 tensor ``[N, K]``, one column per objective (a single-objective reward
    is one column; see :func:`reward_columns` for the names and weights); ``None`` becomes NaN.

    Each reward is called once on the whole batch as ``fn(prompts=..., completions=..., **columns)`` (in its
    worker process under ``isolation: process``).

    Args:
        stats: when given, per reward with a non-default ``on_error`` or ``isolation``, this call's counts are
            added to ``reward_errors/<name>`` (samples that got the ``on_error`` fallback),
            ``reward_timeouts/<name>`` (calls cut off by ``timeout_s``) and, under isolation,
            ``reward_worker_restarts/<name>`` (worker processes started after the first).
        skipped: when given, the indices of the samples some reward with ``on_error: skip`` failed on (their
            value in its columns is NaN) are added to it.

    Raises:
        ValueError: misaligned inputs (prompt/column lengths differ from ``len(completions)``) or a
            column named ``prompts``/``completions``.
        RewardFunctionError: with ``on_error: raise``, a reward raised (the batch is then re-scored one sample
            at a time to name the first failing sample; a reward that fails only on the whole batch is reported
            as such), returned the wrong number of values, or returned a non-number / NaN / inf; under
            isolation, its call timed out or its worker died. Whatever ``on_error``, a worker that cannot load
            the reward.
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
        if not spec.tolerant:  # today's path: the reward runs here and any failure stops the run
            columns_out.append(_score_strict(spec, prompts, completions, cols, where))
            continue
        restarts = spec.worker.restarts if spec.worker is not None else 0
        try:
            if spec.on_error == "raise":
                rows, failures = _score_strict(spec, prompts, completions, cols, where), _Failures()
            else:
                rows, failures = _score_tolerant(spec, prompts, completions, cols, where)
        finally:
            if spec.worker is not None:
                _add(stats, f"reward_worker_restarts/{spec.name}", spec.worker.restarts - restarts)
        _report(spec, failures, where, n)
        _add(stats, f"reward_errors/{spec.name}", len(failures.samples))
        _add(stats, f"reward_timeouts/{spec.name}", failures.timeouts)
        if skipped is not None and spec.on_error == "skip":
            skipped.update(failures.samples)
        columns_out.append(rows)
    width = sum(len(s.columns) for s in specs)
    if not n or not width:
        return torch.empty(n, width, dtype=torch.float32)
    return torch.tensor([[v for rows in columns_out for v in rows[i]] for i in range(n)], dtype=torch.float32)
