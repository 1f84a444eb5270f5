"""Held-out evaluation: greedy completions scored by the accuracy reward, with a 95% Wilson CI."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from grove.evaluation.stats import AccuracyReport
from grove.infra.precision import autocast
from grove.rewards.scoring import RewardSpec, compute_rewards
from grove.rollout.engine import RolloutEngine, SamplingParams, encode_prompts
from grove.tasks.task import Example, columns_for_rewards


@dataclass(frozen=True)
class EvalResult:
    report: AccuracyReport
    samples: list[dict]
    seconds: float
    mean_length: float
    extra: dict[str, float] = field(default_factory=dict)  # source-specific statistics (e.g. mean turns)

    def record(self) -> dict:
        r = self.report
        return {
            **self.extra,
            "accuracy": r.accuracy,
            "correct": r.correct,
            "total": r.total,
            "ci_low": r.ci_low,
            "ci_high": r.ci_high,
            "mean_completion_tokens": self.mean_length,
            "seconds": self.seconds,
        }


def evaluate(
    engine: RolloutEngine,
    tokenizer,
    examples: Sequence[Example],
    accuracy_reward: RewardSpec,
    *,
    max_new_tokens: int,
    stop: tuple[str, ...] = (),
    system_prompt: str | None = None,
    use_chat_template: bool = True,
    batch_size: int = 64,
) -> EvalResult:
    """Greedy-decode every example once; a reward value of 1.0 counts as correct."""
    start = time.perf_counter()
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=stop)
    generator = torch.Generator().manual_seed(0)  # unused by greedy decoding, required by the interface
    scores: list[float] = []
    samples: list[dict] = []
    lengths = 0
    for first in range(0, len(examples), batch_size):
        chunk = list(examples[first : first + batch_size])
        ids = encode_prompts(
            tokenizer, [e.prompt for e in chunk], system_prompt=system_prompt, use_chat_template=use_chat_template
        )
        out = engine.generate(ids, 1, sampling, generator)
        prompts = [e.prompt_text for e in chunk]
        columns = columns_for_rewards(chunk)
        values = compute_rewards([accuracy_reward], prompts, out.texts, columns, step=-1)[:, 0]
        values = torch.nan_to_num(values, nan=0.0).tolist()
        scores.extend(values)
        lengths += int(out.response_mask.sum())
        samples.extend(
            {"prompt": p, "completion": c, "answer": e.answer, "correct": v >= 1.0}
            for p, c, e, v in zip(prompts, out.texts, chunk, values, strict=True)
        )
    return EvalResult(
        report=AccuracyReport.from_scores(scores),
        samples=samples,
        seconds=time.perf_counter() - start,
        mean_length=lengths / max(len(examples), 1),
    )


def evaluate_config(engine: RolloutEngine, tokenizer, cfg, rewards: Sequence[RewardSpec], examples: Sequence[Example]) -> EvalResult:
    """:func:`evaluate` with every setting taken from a :class:`grove.config.GroveConfig`.

    The accuracy reward is ``eval.accuracy_reward`` (default: the first reward); generation runs
    under the configured ``train.precision``.
    """
    reward = next(r for r in rewards if r.name == cfg.accuracy_reward_name)
    with autocast(cfg.train.precision):
        return evaluate(
            engine,
            tokenizer,
            examples,
            reward,
            max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
            stop=tuple(cfg.rollout.stop),
            system_prompt=cfg.rollout.system_prompt,
            use_chat_template=cfg.rollout.use_chat_template,
            batch_size=cfg.eval.batch_size,
        )
