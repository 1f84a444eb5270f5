"""word_math: a small verifiers (0.4.0) taskset made in code, for grove's verifiers example (runs offline).

Word problems on small numbers ("Ana has 7 pears and gets 5 more. How many pears does Ana have now?"), each with
its gold answer, scored by a rubric of two weighted reward functions:

* ``correct_answer`` (weight 1.0): the number in the reply's last ``<answer>...</answer>`` block (else the reply's
  last number) equals the gold answer;
* ``answer_format`` (weight 0.2): the reply holds exactly one ``<answer>`` block, with a number in it.

verifiers' reward of a reply is ``1.0 * correct_answer + 0.2 * answer_format``. grove loads it with
``environment: examples.verifiers_envs.word_math:load_environment`` (from the repository root, which the ``grove``
command puts on the import path), or, with this folder on ``PYTHONPATH``, as the taskset id ``word_math``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

import verifiers.v1 as vf

SYSTEM_PROMPT = "Solve the problem. Write only the final number inside <answer></answer> tags."

NAMES = ("Ana", "Ben", "Chloe", "Dev", "Eva", "Femi", "Gus", "Hana", "Ivo", "Jin")
ITEMS = ("apples", "pears", "marbles", "stamps", "shells", "coins", "books", "cards")

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER = re.compile(r"-?\d+")


class WordMathConfig(vf.TasksetConfig):
    num_tasks: int = 200
    """How many problems (distinct; at most len(NAMES) * len(ITEMS) * 2 * 81)."""
    seed: int = 0
    """Seed of the problems' order and numbers."""


class WordMathData(vf.TaskData):
    answer: str
    """The gold answer, a whole number."""


def replied_number(reply: str) -> str | None:
    """The number in the last ``<answer>`` block, else the reply's last number; ``None`` when there is none."""
    blocks = _ANSWER.findall(reply)
    numbers = _NUMBER.findall(blocks[-1] if blocks else reply)
    return numbers[-1] if numbers else None


class WordMathTask(vf.Task[WordMathData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct_answer(self, task: WordMathData, trace: vf.Trace) -> float:
        return float(replied_number(trace.last_reply) == task.answer)

    @vf.reward(weight=0.2)
    async def answer_format(self, trace: vf.Trace) -> float:
        blocks = _ANSWER.findall(trace.last_reply)
        return float(len(blocks) == 1 and _NUMBER.fullmatch(blocks[0].strip()) is not None)


class WordMathTaskset(vf.Taskset[WordMathTask, WordMathConfig]):
    def load(self) -> Iterator[WordMathTask]:
        space = [(n, i, op, a, b) for n in NAMES for i in ITEMS for op in "+-" for a in range(2, 11) for b in range(1, 10)]
        space = [s for s in space if s[2] == "+" or s[3] > s[4]]
        if self.config.num_tasks > len(space):
            raise ValueError(f"num_tasks must be at most {len(space)}")
        for k, (name, item, op, a, b) in enumerate(random.Random(self.config.seed).sample(space, self.config.num_tasks)):
            change = f"gets {b} more" if op == "+" else f"gives {b} away"
            yield WordMathTask(
                WordMathData(
                    name=f"word-math-{k}",
                    prompt=f"{name} has {a} {item} and {change}. How many {item} does {name} have now?",
                    system_prompt=SYSTEM_PROMPT,
                    answer=str(a + b if op == "+" else a - b),
                ),
                self.config.task,
            )


def load_environment(**kwargs: object) -> WordMathTaskset:
    """The taskset, its config fields (``num_tasks``, ``seed``) given as keyword arguments."""
    return WordMathTaskset(WordMathConfig(**kwargs))


__all__ = ["WordMathTaskset", "load_environment"]
