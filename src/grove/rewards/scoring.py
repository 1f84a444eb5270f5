"""Compute reward functions on a batch (resolving them from the config is :mod:`grove.rewards.reward_resolution`,
re-exported here).

A reward in the config is either a registry id (``answer_match``) with parameters, or a user function
given by import path (``mypkg.rewards:my_fn``). Either way it becomes a :class:`RewardSpec` holding a
plain TRL-style callable ``fn(prompts, completions, **columns) -> list[float | None]``.

User reward contract
--------------------
* Called with keyword arguments ``prompts=[...]``, ``completions=[...]`` and one keyword per dataset
  column (lists aligned with ``completions``). Accept ``**kwargs`` to ignore columns you do not use.
* Return one value per completion: a real number, or ``None`` when the reward does not apply to that
  sample (it is then left out of the weighted sum for that sample; a sample no weighted reward applies to is
  left out of the training step, :mod:`grove.experience.completion_collection`). NaN and ±inf are rejected (return ``None``
  instead of NaN), and so is a value whose magnitude does not fit the float32 reward matrix (e.g. ``1e300``).
* A reward may score several *objectives* in one call (one clinical checker, not K): it declares their
  names (the ``objectives`` key of its config block, a ``fn.objectives`` attribute, or — for a registered
  reward — its params model's ``objective_names()``) and returns per sample a dict
  ``{objective: value | None}`` or a row of values in that order (a list of lists or an ``[n, k]`` array).
  Each objective becomes a column of the reward matrix with weight ``weight × objective_weights[name]``.
* Exceptions are not swallowed (``on_error: raise``, the default): they are re-raised as
  :class:`RewardFunctionError` naming the reward, the training step, the failing sample and a truncated
  prompt/completion.
* A reward cannot end the run: ``sys.exit`` (and a ``KeyboardInterrupt`` it raises while grove handles the stop
  signals, :func:`grove.user_code.user_code`) is a ``UserCodeExit``, a failure of that reward like an exception.

Failures, hangs and crashes (per reward: ``on_error``, ``isolation``, ``timeout_s``)
-------------------------------------------------------------------------------
* ``on_error: zero`` / ``skip``: a sample the reward raised on (or returned a malformed / NaN / inf value for)
  gets 0.0 / NaN ("does not apply") in the reward's columns instead of stopping the run. If the batch call failed,
  the batch is re-scored one sample at a time so only the failing samples get the fallback. Failed samples,
  batch calls re-scored one sample at a time (even where every sample then scores), timeouts and worker restarts
  are counted into ``stats`` (``reward_errors/<name>``, ``reward_batch_retries/<name>``,
  ``reward_timeouts/<name>``, ``reward_worker_restarts/<name>``); each reward's first failure is logged once, with
  its traceback, on the ``grove.rewards`` logger, and so is its first failed batch call whose samples then all
  scored alone (a reward that fails only on a whole batch costs one call per sample, and may score a sample
  differently alone than in a batch).
* ``isolation: process``: the reward runs in its own long-lived worker process
  (:mod:`grove.infra.reward_workers`), so a segfault or ``os._exit`` kills only the worker (restarted for the
  next call), and ``timeout_s`` can cut a hanging call off (the worker is killed). A batch call that timed out
  fails as a whole (its samples are not re-run one by one: a hang would cost ``timeout_s`` per sample); a batch
  call that raised or crashed the worker is re-scored sample by sample in the worker, each call with the limit
  (with ``on_error: raise`` up to the first failing sample, which the error names).
"""

from __future__ import annotations

import logging
import math
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from grove.infra.reward_workers import (
    RemoteRewardError,
    RewardCallTimeout,
    RewardWorkerDied,
    RewardWorkerError,
    RewardWorkerStartError,
)
from grove.rewards.reward_resolution import (  # noqa: F401  (re-exported: the public reward API lives here)
    OnError,
    RewardFn,
    RewardFunctionError,
    RewardLoadError,
    RewardSpec,
    bind_reward,
    resolve_reward,
    resolve_rewards,
    reward_columns,
)
from grove.rewards.values import RewardValueError, value_rows
from grove.user_code import user_code

_PREVIEW_CHARS = 200

log = logging.getLogger("grove.rewards")


def _preview(value: Any, limit: int = _PREVIEW_CHARS) -> str:
    """Short repr of a prompt (string or chat messages) or completion for error messages."""
    if isinstance(value, list) and value and isinstance(value[-1], dict) and "content" in value[-1]:
        value = f"[{len(value)} messages; last {value[-1].get('role', '?')}] {value[-1]['content']}"
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[: limit // 2] + f" …[{len(text) - limit} chars]… " + text[-limit // 2 :]
    return repr(text)


def sample_detail(prompts: Sequence[Any], completions: Sequence[str], i: int) -> str:
    """``prompt='…', completion='…'`` of sample ``i``, each truncated, for error messages naming a sample."""
    return f"prompt={_preview(prompts[i])}, completion={_preview(completions[i])}"


def _call(
    spec: RewardSpec, prompts: Sequence[Any], completions: Sequence[str], columns: Mapping[str, list]
) -> Any:
    if spec.worker is not None:  # isolation: process (the worker turns sys.exit into an error the same way)
        kwargs = {"prompts": list(prompts), "completions": list(completions), **columns}
        return spec.worker.call(kwargs, spec.timeout_s)
    with user_code(f"reward {spec.name!r}"):  # sys.exit / KeyboardInterrupt in the reward: a failure like any other
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


_WORKER_HINT = (
    " (isolation: process; a fresh worker is started for the next call; set on_error: zero or skip to go on "
    "without these samples)"
)


def _crashed(error: BaseException) -> bool:
    """The worker timed out or died (not an exception of the reward's own)."""
    return isinstance(error, RewardCallTimeout | RewardWorkerDied)


def _verb(error: BaseException) -> str:
    return "failed" if _crashed(error) else "raised"


def _hint(error: BaseException) -> str:
    return _WORKER_HINT if _crashed(error) else ""


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
    except RewardCallTimeout as e:  # not re-run per sample: a hang would cost timeout_s per sample
        raise RewardFunctionError(f"{where} failed on the batch of {n} samples: {e}{_WORKER_HINT}") from e
    except Exception as batch_error:  # raised, or the worker died (crash, os._exit): find the first failing sample
        try:
            located = _locate_failure(spec, prompts, completions, cols)
        except RewardWorkerStartError as e:
            raise RewardFunctionError(f"{where}: {e}") from e
        if located is None:
            raise RewardFunctionError(
                f"{where} {_verb(batch_error)} on the batch of {n} samples (but on no single sample): "
                f"{_describe(batch_error)}; first sample: "
                f"{sample_detail(prompts, completions, 0) if n else '(empty batch)'}{_hint(batch_error)}"
            ) from batch_error
        i, error = located
        raise RewardFunctionError(
            f"{where} {_verb(error)} on sample {i}: {_describe(error)}; "
            f"{sample_detail(prompts, completions, i)}{_hint(error)}"
        ) from error
    try:
        return value_rows(values, n, spec.objectives, lambda i: sample_detail(prompts, completions, i), spec.unselected)
    except RewardValueError as e:
        raise RewardFunctionError(f"{where} {e}") from None


def _traceback(error: BaseException) -> str:
    """The traceback of a reward's exception (the worker's, for one raised in a worker; none for a timeout or a
    dead worker)."""
    if isinstance(error, RemoteRewardError):
        return error.remote_traceback
    if isinstance(error, RewardWorkerError):
        return ""
    return "".join(traceback.format_exception(error))


@dataclass
class _Failures:
    """What went wrong while one reward scored one batch: failed samples (index → reason), timed-out calls, the
    first failure's traceback (for the once-per-run log) and why the batch call failed when the batch was re-scored
    one sample at a time (its traceback too)."""

    samples: dict[int, str] = field(default_factory=dict)
    timeouts: int = 0
    first_traceback: str = ""
    batch_failure: str = ""
    batch_traceback: str = ""

    def add(self, i: int, reason: str, error: BaseException | None = None) -> None:
        self.samples.setdefault(i, reason)
        if isinstance(error, RewardCallTimeout):
            self.timeouts += 1
        if len(self.samples) == 1 and not self.first_traceback and error is not None:
            self.first_traceback = _traceback(error)

    def retry(self, failure: str, error: BaseException | None = None) -> None:
        """The batch call failed (``failure``: how) and the batch is re-scored one sample at a time."""
        self.batch_failure = failure
        self.batch_traceback = _traceback(error) if error is not None else ""


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
        detail = sample_detail(prompts, completions, i)
        try:
            rows.append(_value_row(spec, _call_one(spec, prompts, completions, cols, i), detail))
        except RewardWorkerStartError:
            raise
        except RewardValueError as e:
            failures.add(i, str(e).replace("for sample 0:", f"for sample {i}:", 1))
            rows.append(list(fallback))
        except Exception as e:  # noqa: BLE001 - on_error zero/skip: the sample gets the fallback
            failures.add(i, f"{_verb(e)} on sample {i}: {_describe(e)}; {detail}", e)
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
        except Exception as e:  # noqa: BLE001 - raised, or the worker died: find the failing samples
            failures.retry(f"{_verb(e)} on the batch of {n} samples: {_describe(e)}", e)
            return _score_each(spec, prompts, completions, cols, fallback, failures), failures
        try:
            return value_rows(
                values, n, spec.objectives, lambda i: sample_detail(prompts, completions, i), spec.unselected
            ), failures
        except RewardValueError as e:
            malformed = str(e)
        listed = values.tolist() if hasattr(values, "tolist") and not isinstance(values, list | tuple) else values
        if not isinstance(listed, list | tuple) or len(listed) != n:  # malformed as a whole: one sample per call
            failures.retry(malformed)
            return _score_each(spec, prompts, completions, cols, fallback, failures), failures
        rows = []
        for i, value in enumerate(listed):  # only the bad values fail
            try:
                rows.append(_value_row(spec, [value], sample_detail(prompts, completions, i)))
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


def _report_retry(spec: RewardSpec, failures: _Failures, where: str) -> None:
    """Log, with its traceback, a reward's first batch call of the run that failed although every sample of the
    batch then scored alone (a failure no sample explains, which re-scoring would otherwise hide); later ones are
    only counted. A batch some samples fail alone on is reported by :func:`_report`."""
    if not failures.batch_failure or failures.samples or spec._batch_retry_logged[0]:
        return
    spec._batch_retry_logged[0] = True
    log.warning(
        "%s %s, but every sample scored when called alone: the batch was re-scored one sample at a time (one call "
        "per sample) and the run goes on. A reward should score a batch as it scores its samples one by one: fix "
        "its batch call. Later re-scored batches of this reward are only counted (metric reward_batch_retries/%s).%s",
        where, failures.batch_failure, spec.name,
        f"\n{failures.batch_traceback.rstrip()}" if failures.batch_traceback else "",
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
    when: str | None = None,
    stats: dict[str, float] | None = None,
    skipped: set[int] | None = None,
) -> torch.Tensor:
    """Score ``N`` completions: a float32 tensor ``[N, K]``, one column per objective (a single-objective reward
    is one column; see :func:`reward_columns` for the names and weights); ``None`` becomes NaN.

    Each reward is called once on the whole batch as ``fn(prompts=..., completions=..., **columns)`` (in its
    worker process under ``isolation: process``).

    Args:
        step: the training step, for messages (``"reward 'x' at step 3"``).
        when: says when instead, for scoring outside a training step (e.g. ``"in the evaluation before training"``).
        stats: when given, per reward with a non-default ``on_error`` or ``isolation``, this call's counts are
            added to ``reward_errors/<name>`` (samples that got the ``on_error`` fallback),
            ``reward_batch_retries/<name>`` (batch calls that failed, the batch then re-scored one sample at a time),
            ``reward_timeouts/<name>`` (calls cut off by ``timeout_s``) and, under isolation,
            ``reward_worker_restarts/<name>`` (worker processes started after the first).
        skipped: when given, the indices of the samples some reward with ``on_error: skip`` failed on (their
            value in its columns is NaN) are added to it.

    Raises:
        ValueError: misaligned inputs (prompt/column lengths differ from ``len(completions)``) or a
            column named ``prompts``/``completions``.
        RewardFunctionError: with ``on_error: raise``, a reward raised or called ``sys.exit`` (the batch is then
            re-scored one sample at a time to name the first failing sample; a reward that fails only on the
            whole batch is reported as such), returned the wrong number of values, or returned a non-number /
            NaN / inf / a value beyond float32; under isolation, its call timed out or its worker died (on a
            sample the message names). Whatever ``on_error``, a worker that cannot load the reward.
        KeyboardInterrupt: raised by a reward outside grove's stop-signal handlers (it may be the user's Ctrl-C).
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
        where = f"reward {spec.name!r} {when or f'at step {step}'}"
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
        _report_retry(spec, failures, where)
        _add(stats, f"reward_errors/{spec.name}", len(failures.samples))
        _add(stats, f"reward_batch_retries/{spec.name}", bool(failures.batch_failure))
        _add(stats, f"reward_timeouts/{spec.name}", failures.timeouts)
        if skipped is not None and spec.on_error == "skip":
            skipped.update(failures.samples)
        columns_out.append(rows)
    width = sum(len(s.columns) for s in specs)
    if not n or not width:
        return torch.empty(n, width, dtype=torch.float32)
    return torch.tensor([[v for rows in columns_out for v in rows[i]] for i in range(n)], dtype=torch.float32)
