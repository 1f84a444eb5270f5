"""Held-out evaluation: greedy completions scored by every reward; the accuracy objective (value 1.0 = correct)
gets a 95% Wilson CI and every objective its mean over the samples it applies to (``objective/<name>``). With
``samples`` N, also N sampled completions per example: ``sampled/accuracy`` with an interval over the examples and
the unbiased ``sampled/pass@k`` (:class:`grove.evaluation.stats.SampledReport`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from grove.evaluation.stats import AccuracyReport, SampledReport
from grove.infra.heartbeat import report_progress
from grove.infra.precision import autocast
from grove.rewards.scoring import RewardSpec, compute_rewards, reward_columns
from grove.rollout.engine import RolloutEngine, SamplingParams, context_length, prompt_preview
from grove.rollout.prompt_encoding import EncodedPrompts, encode_prompt_batch, fit_encoded
from grove.tasks.task import Example, columns_for_rewards

log = logging.getLogger("grove.evaluation")


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
    rewards: Sequence[RewardSpec],
    accuracy: str,
    *,
    max_new_tokens: int,
    stop: tuple[str, ...] = (),
    system_prompt: str | None = None,
    use_chat_template: bool = True,
    batch_size: int = 64,
    prompt_overflow: str = "error",
    max_new_tokens_key: str = "rollout.max_new_tokens",
    when: str = "in evaluation",
    samples: int = 0,
    sampling: SamplingParams | None = None,
    seed: int = 0,
) -> EvalResult:
    """Greedy-decode every example once and score it with every reward (``when`` says which evaluation, in a
    reward's error messages).

    ``accuracy`` names the reward (or objective) column whose value 1.0 counts as correct. Every column's
    mean over the samples it applies to is reported as ``objective/<name>`` (with ``objective/<name>/n``).
    A prompt too long for the model's context with ``max_new_tokens`` is an error or cut on the left
    (``prompt_overflow``, :func:`grove.rollout.engine.fit_prompts`).

    ``samples`` N > 0 adds N completions per example drawn with ``sampling`` (its temperature, top-p and top-k;
    the length and stop strings are the greedy pass's) from a generator seeded with ``seed``: their accuracy
    column gives ``sampled/accuracy`` and ``sampled/pass@k``.
    """
    start = time.perf_counter()
    names, _ = reward_columns(rewards)
    column = _accuracy_column(names, accuracy)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=stop)
    generator = torch.Generator().manual_seed(0)  # unused by greedy decoding, required by the interface
    if samples and (sampling is None or sampling.temperature == 0):
        raise ValueError("evaluate: samples > 0 needs sampling parameters with a temperature above 0")
    if samples:
        sampled = SamplingParams(sampling.temperature, sampling.top_p, sampling.top_k, max_new_tokens, stop)
        sample_generator = torch.Generator().manual_seed(seed)
    matrices: list[torch.Tensor] = []
    samples_out: list[dict] = []
    sampled_out: list[dict] = []  # after the greedy samples in the result
    sampled_correct: list[int] = []
    lengths = truncated = sampled_tokens = 0
    limit = context_length(getattr(engine, "model", None), tokenizer)
    for first in range(0, len(examples), batch_size):
        chunk = list(examples[first : first + batch_size])
        ids, cut = _fitted_prompts(
            tokenizer, chunk, first, system_prompt=system_prompt, use_chat_template=use_chat_template,
            context_length=limit, max_new_tokens=max_new_tokens, overflow=prompt_overflow,
            max_new_tokens_key=max_new_tokens_key,
        )
        truncated += cut
        values, tokens, records = _greedy_pass(engine, ids, chunk, rewards, column, greedy, generator, when, first)
        matrices.append(values)
        lengths += tokens
        samples_out.extend(records)
        if samples:
            counts, tokens, records = _sampled_pass(
                engine, ids, chunk, rewards, column, samples, sampled, sample_generator, batch_size, when, first
            )
            sampled_correct.extend(counts)
            sampled_tokens += tokens
            sampled_out.extend(records)
        report_progress(min(first + batch_size, len(examples)), len(examples), "held-out prompts")
    if truncated:
        log.warning("rollout.prompt_overflow: truncate_left: %d of %d eval prompts lost their first tokens to fit "
                    "the model's context", truncated, len(examples))
    matrix = torch.cat(matrices) if matrices else torch.empty(0, len(names))
    extra = {**(objective_means(matrix, names) if len(names) > 1 else {}), **_summaries(rewards, matrix, columns_for_rewards(list(examples)))}
    if samples:
        extra.update(_sampled_metrics(sampled_correct, samples, sampled_tokens, sampled.temperature))
    return EvalResult(
        report=AccuracyReport.from_scores(torch.nan_to_num(matrix[:, column], nan=0.0).tolist()),
        samples=samples_out + sampled_out,
        seconds=time.perf_counter() - start,
        mean_length=lengths / max(len(examples), 1),
        extra=extra,
    )


def _accuracy_column(names: Sequence[str], accuracy: str) -> int:
    """The index of the column whose value 1.0 counts as correct; an error naming the columns when there is none."""
    if accuracy not in names:
        raise ValueError(f"eval.accuracy_reward: {accuracy!r} is not a reward or objective; columns: {', '.join(names)}")
    return list(names).index(accuracy)


def _sampled_metrics(correct: list[int], samples: int, tokens: int, temperature: float) -> dict[str, float]:
    """``sampled/*``: accuracy over items with its interval, pass@k, mean completion length, the temperature."""
    return {
        **SampledReport.from_item_counts(correct, samples).record(),
        "sampled/mean_completion_tokens": tokens / max(len(correct) * samples, 1),
        "sampled/temperature": temperature,
    }


def _greedy_pass(
    engine: RolloutEngine,
    ids: EncodedPrompts,
    chunk: list[Example],
    rewards: Sequence[RewardSpec],
    column: int,
    greedy: SamplingParams,
    generator: torch.Generator,
    when: str,
    first: int = 0,
) -> tuple[torch.Tensor, int, list[dict]]:
    """One greedy completion of each example of ``chunk`` (examples ``first ..`` of the evaluation): its reward
    matrix, the generated tokens, the records (``item``: the example's index, which tells apart prompts of the same
    text with other images)."""
    names, _ = reward_columns(rewards)
    out = engine.generate(ids.ids, 1, greedy, generator, **ids.image_kwargs)
    prompts = [e.prompt_text for e in chunk]
    columns = columns_for_rewards(chunk, out.completion_ids)
    values = compute_rewards(rewards, prompts, out.texts, columns, step=-1, when=when)
    correct = (torch.nan_to_num(values[:, column], nan=0.0) >= 1.0).tolist()
    records = [
        {"item": first + k, "prompt": p, "completion": c, "answer": e.answer, "correct": ok,
         "rewards": dict(zip(names, row, strict=True))}
        for k, (p, c, e, ok, row) in enumerate(zip(prompts, out.texts, chunk, correct, values.tolist(), strict=True))
    ]
    return values, int(out.response_mask.sum()), records


def _fitted_prompts(
    tokenizer: Any,
    chunk: list[Example],
    first: int,
    *,
    system_prompt: str | None,
    use_chat_template: bool,
    context_length: int | None,
    max_new_tokens: int,
    overflow: str,
    max_new_tokens_key: str,
) -> tuple[EncodedPrompts, int]:
    """The encoded prompts of ``chunk`` (examples ``first ..`` of the evaluation), fitted to the model's context
    (:func:`grove.rollout.prompt_encoding.fit_encoded`), and how many lost their first tokens."""
    describe = lambda k: f"eval example {first + k} ({prompt_preview(chunk[k].prompt)})"  # noqa: E731
    ids = encode_prompt_batch(tokenizer, [e.prompt for e in chunk], system_prompt=system_prompt,
                              use_chat_template=use_chat_template, describe=describe)
    return fit_encoded(
        ids, context_length=context_length, max_new_tokens=max_new_tokens, overflow=overflow, describe=describe,
        max_new_tokens_key=max_new_tokens_key,
    )


def _sampled_pass(
    engine: RolloutEngine,
    ids: EncodedPrompts,
    chunk: list[Example],
    rewards: Sequence[RewardSpec],
    column: int,
    samples: int,
    sampled: SamplingParams,
    generator: torch.Generator,
    batch_size: int,
    when: str,
    first: int = 0,
) -> tuple[list[int], int, list[dict]]:
    """``samples`` sampled completions of each example of ``chunk`` (prompt ids ``ids``; examples ``first ..``),
    ``batch_size`` rows per generation as the greedy pass: each example's correct count, the generated tokens, the
    sample records (``item`` as the greedy pass's)."""
    names, _ = reward_columns(rewards)
    counts: list[int] = []
    tokens = 0
    records: list[dict] = []
    per_batch = max(1, batch_size // samples)
    for part in range(0, len(chunk), per_batch):
        part_ids, part_examples = ids.rows(part, part + per_batch), chunk[part : part + per_batch]
        drawn = engine.generate(part_ids.ids, samples, sampled, generator, **part_ids.image_kwargs)  # rows i·samples + j
        repeated = [e for e in part_examples for _ in range(samples)]
        items = [first + part + k for k in range(len(part_examples)) for _ in range(samples)]
        columns = columns_for_rewards(repeated, drawn.completion_ids)
        scores = compute_rewards(rewards, [e.prompt_text for e in repeated], drawn.texts, columns, step=-1, when=when)
        hits = (torch.nan_to_num(scores[:, column], nan=0.0) >= 1.0).view(len(part_examples), samples)
        counts.extend(hits.sum(dim=1).tolist())
        tokens += int(drawn.response_mask.sum())
        records.extend(
            {"item": item, "prompt": e.prompt_text, "completion": c, "answer": e.answer, "correct": bool(ok),
             "eval_mode": "sampled", "rewards": dict(zip(names, row, strict=True))}
            for item, e, c, ok, row in zip(items, repeated, drawn.texts, hits.flatten().tolist(), scores.tolist(),
                                           strict=True)
        )
    return counts, tokens, records


def _summaries(rewards: Sequence[RewardSpec], matrix: torch.Tensor, columns: dict[str, list]) -> dict[str, float]:
    """Headline numbers a reward computes from its own column block (``fn.evaluation_summary``, e.g. IFEval's
    prompt- and instruction-level accuracy)."""
    out: dict[str, float] = {}
    start = 0
    for spec in rewards:
        width = len(spec.columns)
        summary = getattr(spec.fn, "evaluation_summary", None)
        if summary is not None and matrix.shape[0]:
            out.update(summary(matrix[:, start : start + width], list(spec.columns), columns))
        start += width
    return out


def objective_means(matrix: torch.Tensor, names: Sequence[str]) -> dict[str, float]:
    """``objective/<name>``: each column's mean over the samples it applies to, and how many (``.../n``)."""
    out: dict[str, float] = {}
    for k, name in enumerate(names):
        valid = matrix[:, k][~torch.isnan(matrix[:, k])]
        out[f"objective/{name}/n"] = float(valid.numel())
        if valid.numel():
            out[f"objective/{name}"] = float(valid.mean())
    return out


def evaluate_config(
    engine: RolloutEngine,
    tokenizer,
    cfg,
    rewards: Sequence[RewardSpec],
    examples: Sequence[Example],
    training_step: int | None = None,
) -> EvalResult:
    """:func:`evaluate` with every setting taken from a :class:`grove.config.GroveConfig`.

    The accuracy column is ``eval.accuracy_reward`` (default: the first reward's first objective);
    generation runs under the configured ``train.precision``. ``training_step``: the step a training run has
    reached (0: before training; ``None``: outside a training run), for messages.
    """
    accuracy = cfg.eval.accuracy_reward or reward_columns(rewards)[0][0]
    with autocast(cfg.train.precision):
        return evaluate(
            engine,
            tokenizer,
            examples,
            rewards,
            accuracy,
            max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
            stop=tuple(cfg.rollout.stop),
            system_prompt=cfg.rollout.system_prompt,
            use_chat_template=cfg.rollout.use_chat_template,
            batch_size=cfg.eval.batch_size,
            prompt_overflow=cfg.rollout.prompt_overflow,
            max_new_tokens_key="eval.max_new_tokens" if cfg.eval.max_new_tokens else "rollout.max_new_tokens",
            when=evaluation_moment(training_step),
            samples=cfg.eval.samples,
            sampling=SamplingParams(cfg.sampled_eval_temperature, cfg.rollout.top_p, cfg.rollout.top_k),
            seed=cfg.seed,
        )


def evaluation_moment(training_step: int | None) -> str:
    """How messages name an evaluation: before training, after step N, or outside a training run."""
    if training_step is None:
        return "in evaluation"
    return "in the evaluation before training" if training_step == 0 else f"in the evaluation after step {training_step}"
