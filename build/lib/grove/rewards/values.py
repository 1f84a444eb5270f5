"""Check and convert what a reward function returns into rows of the reward matrix.

A single-objective reward returns one number (or ``None``) per sample. A multi-objective reward (one that
declares its objective names) returns, per sample, either a dict ``{objective: number | None}`` (a missing
key means the objective does not apply) or a row of ``k`` numbers in the declared order — i.e. a list of
dicts, a list of lists, or an ``[n, k]`` array/tensor. ``None`` becomes NaN; NaN and ±inf are rejected, and so is
a value whose magnitude exceeds :data:`FLOAT32_MAX` (finite in Python's float64, it would be ±inf in the float32
reward matrix).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["FLOAT32_MAX", "RewardValueError", "dataset_column", "to_float", "value_rows"]

#: the largest finite float32 (``torch.finfo(torch.float32).max``): the reward matrix is float32
FLOAT32_MAX = 3.4028234663852886e38


class RewardValueError(ValueError):
    """A reward returned something malformed; the message names the sample index."""


def to_float(value: Any) -> float | None:
    """A reward value as float (None stays None); raises TypeError/ValueError when malformed."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not (isinstance(value, numbers.Real) or hasattr(value, "__float__")):
        raise TypeError(f"reward values must be numbers or None, got {type(value).__name__} {value!r}")
    try:
        out = float(value)
    except OverflowError:  # an int beyond float64, e.g. 2**1024
        raise ValueError(
            f"reward value ({type(value).__name__}, magnitude ≥ 2**1024) overflows float32 (the reward matrix's "
            f"type); scale the reward down"
        ) from None
    if not math.isfinite(out):
        raise ValueError(f"reward value {out} is not finite (return None for 'does not apply')")
    if abs(out) > FLOAT32_MAX:
        raise ValueError(
            f"reward value {out:g} overflows float32 (the reward matrix's type; largest magnitude "
            f"{FLOAT32_MAX:.4g}): it would become {'+' if out > 0 else '-'}inf; scale the reward down"
        )
    return out


def _as_list(values: Any) -> Any:
    if hasattr(values, "tolist") and not isinstance(values, list | tuple):
        return values.tolist()
    return values


def value_rows(
    values: Any,
    n: int,
    objectives: Sequence[str] | None,
    detail: Callable[[int], str],
    ignored: frozenset[str] = frozenset(),
) -> list[list[float]]:
    """``n`` rows of floats (NaN for None), one column per objective (one column when ``objectives`` is None).

    ``ignored``: dict keys the reward produces but the config did not select (they are dropped).

    Raises:
        RewardValueError: not a sequence of ``n`` entries, a bad value, an unknown objective key, or a row of
            the wrong width; the message names the sample and shows it (``detail(i)``).
    """
    values = _as_list(values)
    width = 1 if objectives is None else len(objectives)
    expected = "numbers/None" if objectives is None else f"dicts or rows of {width} objectives"
    if not isinstance(values, list | tuple):
        raise RewardValueError(f"returned {type(values).__name__}, expected a list of {n} {expected}")
    if len(values) != n:
        raise RewardValueError(f"returned {len(values)} values for {n} completions; first sample: {detail(0) if n else '(empty batch)'}")
    position = {name: k for k, name in enumerate(objectives or ())}
    rows: list[list[float]] = []
    for i, value in enumerate(values):
        try:
            if objectives is None:
                cells: list[Any] = [value]
            elif isinstance(value, Mapping):
                unknown = [key for key in value if key not in position and key not in ignored]
                if unknown:
                    raise ValueError(f"unknown objective(s) {unknown}; declared: {', '.join(objectives)}")
                cells = [value.get(name) for name in objectives]
            else:
                cells = list(_as_list(value)) if isinstance(_as_list(value), list | tuple) else None
                if cells is None or len(cells) != width:
                    raise TypeError(
                        f"expected a dict or a row of {width} values ({', '.join(objectives)}), got {value!r}"
                    )
            row = []
            for cell in cells:
                as_float = to_float(cell)
                row.append(math.nan if as_float is None else as_float)
        except (TypeError, ValueError) as e:
            raise RewardValueError(f"returned a bad value for sample {i}: {e}; {detail(i)}") from None
        rows.append(row)
    return rows


def dataset_column(
    columns: Mapping[str, Any], name: str, n: int, *, reward: str, required: bool = True, source: str = ""
) -> list[Any]:
    """The dataset column ``name`` as a list of ``n`` values (``None`` each when absent and not ``required``).

    Raises:
        ValueError: a required column is missing (naming the reward, the column, ``source`` — e.g. "task
            clinical_hpo" — and the columns given), or the column's length differs from ``n``.
    """
    if name not in columns:
        if not required:
            return [None] * n
        where = f" ({source} provides it)" if source else ""
        raise ValueError(
            f"reward {reward!r} needs a {name!r} dataset column{where}; columns given: "
            f"{', '.join(sorted(columns)) or '(none)'}"
        )
    values = list(columns[name])
    if len(values) != n:
        raise ValueError(f"reward {reward!r}: column {name!r} has {len(values)} values for {n} completions")
    return values
