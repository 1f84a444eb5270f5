"""``arithmetic``: procedurally generated integer arithmetic problems (``"37 + 58 * 12"``).

Every expression is a point of a finite space: ``num_terms`` operands in ``[min_value, max_value]``
and ``num_terms - 1`` operators from ``operators``. Expressions are drawn *without replacement* by
index from that space, so no expression repeats inside a split and none is in both splits. The eval
split is drawn first from a seed of its own, so it depends only on the space, ``seed`` and
``eval_size`` (not on ``train_size``). Answers use the usual precedence (``*`` before ``+``/``-``).
"""

from __future__ import annotations

import bisect
import random
import sys
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grove.tasks.task import TASKS, Example, Task, TaskSplits

Operator = Literal["+", "-", "*"]

DEFAULT_ARITHMETIC_TEMPLATE = "What is {question}? Put the final answer in <answer></answer> tags."


class ArithmeticParams(BaseModel):
    """Parameters of the ``arithmetic`` task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_terms: int = Field(2, ge=2, le=32, description="Number of operands per expression.")
    min_value: int = Field(10, description="Smallest operand (negative operands are parenthesised).")
    max_value: int = Field(99, description="Largest operand.")
    operators: list[Operator] = Field(
        default_factory=lambda: ["+"], min_length=1, description="Operators to draw from ('+', '-', '*')."
    )
    train_size: int = Field(5000, ge=0, description="Number of training problems.")
    eval_size: int = Field(200, ge=0, description="Number of eval problems (disjoint from train).")
    seed: int = Field(0, description="Generation seed; the same seed gives the same splits.")
    prompt_template: str = Field(
        DEFAULT_ARITHMETIC_TEMPLATE,
        description="Prompt text; '{question}' is replaced by the expression (other braces are literal).",
    )

    @field_validator("operators")
    @classmethod
    def _unique_operators(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"operators must not repeat, got {v}")
        return v

    @field_validator("prompt_template")
    @classmethod
    def _has_placeholder(cls, v: str) -> str:
        if "{question}" not in v:
            raise ValueError("prompt_template must contain the '{question}' placeholder")
        return v

    @model_validator(mode="after")
    def _check_space(self) -> ArithmeticParams:
        if self.min_value > self.max_value:
            raise ValueError(f"min_value ({self.min_value}) must be <= max_value ({self.max_value})")
        space = space_size(self)
        if self.train_size + self.eval_size > space:
            raise ValueError(
                f"train_size + eval_size = {self.train_size + self.eval_size} exceeds the {space} distinct "
                f"expressions available; widen the value range, add terms/operators, or ask for fewer"
            )
        return self


def space_size(p: ArithmeticParams) -> int:
    """Number of distinct expressions the parameters allow."""
    return (p.max_value - p.min_value + 1) ** p.num_terms * len(p.operators) ** (p.num_terms - 1)


def decode_expression(index: int, p: ArithmeticParams) -> tuple[list[int], list[str]]:
    """Operands and operators of expression number ``index`` (mixed-radix decoding)."""
    width = p.max_value - p.min_value + 1
    operands: list[int] = []
    for _ in range(p.num_terms):
        index, r = divmod(index, width)
        operands.append(p.min_value + r)
    ops: list[str] = []
    for _ in range(p.num_terms - 1):
        index, r = divmod(index, len(p.operators))
        ops.append(p.operators[r])
    return operands, ops


def format_expression(operands: list[int], ops: list[str]) -> str:
    """``"12 + (-3) * 4"``: operands joined by spaced operators, negatives parenthesised."""
    parts = [f"({x})" if x < 0 else str(x) for x in operands]
    text = parts[0]
    for op, part in zip(ops, parts[1:], strict=True):
        text += f" {op} {part}"
    return text


def evaluate_expression(operands: list[int], ops: list[str]) -> int:
    """Value with standard precedence: products first, then left-to-right ``+``/``-``."""
    terms = [operands[0]]  # signed terms of the sum
    for op, x in zip(ops, operands[1:], strict=True):
        if op == "*":
            terms[-1] *= x
        elif op == "+":
            terms.append(x)
        elif op == "-":
            terms.append(-x)
        else:  # pragma: no cover - guarded by the params model
            raise ValueError(f"unknown operator {op!r}")
    return sum(terms)


def _sample_distinct(
    rng: random.Random, space: int, k: int, exclude: frozenset[int] = frozenset()
) -> list[int]:
    """``k`` distinct indices from ``range(space)`` not in ``exclude``, in draw order.

    Exact without-replacement sampling: ``rng.sample`` over ``range(space - len(exclude))``, each draw
    mapped to the ``r``-th index not in ``exclude``. Spaces too large for ``range``'s ``len`` (above
    ``sys.maxsize``) fall back to rejection sampling, where collisions are vanishingly rare.
    """
    if space <= sys.maxsize:
        excluded = sorted(exclude)
        offsets = [e - i for i, e in enumerate(excluded)]  # non-decreasing
        # the r-th non-excluded integer skips exactly the excluded values whose offset is <= r
        return [r + bisect.bisect_right(offsets, r) for r in rng.sample(range(space - len(excluded)), k)]
    seen: set[int] = set()
    out: list[int] = []
    while len(out) < k:
        i = rng.randrange(space)
        if i not in seen and i not in exclude:
            seen.add(i)
            out.append(i)
    return out


def _example(index: int, p: ArithmeticParams) -> Example:
    operands, ops = decode_expression(index, p)
    question = format_expression(operands, ops)
    answer = str(evaluate_expression(operands, ops))
    return Example(
        prompt=p.prompt_template.replace("{question}", question),
        answer=answer,
        columns={"answer": answer, "question": question},
    )


@TASKS.register(
    "arithmetic",
    params=ArithmeticParams,
    summary="Procedural integer arithmetic (disjoint train/eval expressions, deterministic per seed)",
)
def arithmetic(params: ArithmeticParams) -> Task:
    """Build the arithmetic task: ``eval_size`` + ``train_size`` distinct expressions."""
    space = space_size(params)
    eval_idx = _sample_distinct(
        random.Random(f"grove-arithmetic-eval-{params.seed}"), space, params.eval_size
    )
    train_idx = _sample_distinct(
        random.Random(f"grove-arithmetic-train-{params.seed}"), space, params.train_size, frozenset(eval_idx)
    )
    return TaskSplits(
        name="arithmetic",
        train=tuple(_example(i, params) for i in train_idx),
        eval=tuple(_example(i, params) for i in eval_idx),
    )
