"""Per-token details of some training samples, for ``grove view``: ``RUN_DIR/token_details.jsonl``.

On step 1 and every ``logging.token_details.every``-th step, a share of the step's trained batch (whole prompt
groups in batch order, at most ``max_samples`` rows: :func:`chosen_rows`) is written with every response token and
what the update saw at it: the old (behaviour) log-prob, the policy's entropy, the advantage, the loss mask and the
tokens D^3S token selection kept. One JSON object per sample::

    {"step": 3, "row": 0, "sample_row": 0, "group": 0, "trajectory": 0, "turn": 0, "anchor": null,
     "prompt": "...", "token_ids": [...], "tokens": [...],
     "logprob": [...], "entropy": [...], "advantage": [...], "loss_mask": [1, ...], "kept": [1, ...] | null,
     "rewards": {"name": 1.0}, "sequence_advantage": 0.5}

* ``row``: the sample's index in this rank's trained batch (after sample selection); ``sample_row``: its index in
  the step's collected batch (before selection: the order of ``samples.jsonl``'s completions); ``trajectory``: the
  batch's ``trajectory_index`` (an agent sample's ``trajectory_id`` in ``samples.jsonl``); ``turn``: the batch's
  ``step_index`` (the agent turn, 0 single-turn); ``anchor``: the anchor group of the sample's one environment step
  (per-step prompts), else null.
* The lists have one entry per response token up to the last one that is not padding. ``tokens`` holds each
  token decoded alone. Environment tokens inside an agent's growing conversation have ``loss_mask`` 0 and log-prob
  and entropy 0 (the forward does not score them).
* ``entropy``: from one no-grad pass of the training forward (``train.forward`` layout, precision and sampling
  temperature) over the chosen rows alone, before the update: the policy that generated on-policy samples. It runs
  in the mode the trainer holds the model in before the update (eval: no dropout), so it draws no random numbers
  and leaves the run's training unchanged.
* ``kept``: the loss mask the update trained the row on after D^3S token selection (``selection.tokens``), as the
  update computed it (:attr:`grove.pipeline.update_seam.UpdateOutcome.trained_mask`: with scope ``batch`` or
  ``micro_batch`` it depends on the other rows ranked with it, so only the update knows it); the first epoch's mask.
  null when the step's filter keeps every loss token, or when the update did not run (a non-finite advantage skips
  it).
* ``step_advantages`` (agents, with a step-level estimator): the sample's environment steps in turn order, each
  with the parts its advantage is the sum of, e.g. GiGPO's ``{"turn": 2, "episode": 0.5, "step": -0.25}``
  (A^E and ω·A^S; Step-GRPO: ``step`` and, with ``outcome_weight``, ``episode``).
* Every float is rounded to 4 significant digits (file size); NaN and infinities are null (a reward that does not
  apply to the sample is NaN in the batch).

With several processes each rank trains on its own rows and captures its own records (so an FSDP2 forward, which
gathers parameters collectively, runs on every rank); only rank 0 writes them, so the file shows rank 0's rows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.token_ops import row_mean
from grove.infra.precision import autocast
from grove.models.logprob_module import response_logprobs
from grove.pipeline.update_seam import LossComponents

__all__ = [
    "SIGNIFICANT_DIGITS",
    "StepTokenDetails",
    "TokenDetailsRecorder",
    "chosen_rows",
    "records_on_step",
    "round_significant",
    "token_details_records",
    "token_entropy",
]

SIGNIFICANT_DIGITS = 4

Record = dict[str, Any]


def records_on_step(step: int, every: int) -> bool:
    """Whether ``step`` (1-based) records token details: step 1 and every multiple of ``every``; never at 0."""
    return every > 0 and step > 0 and (step == 1 or step % every == 0)


def chosen_rows(group_index: Tensor, max_samples: int) -> Tensor:
    """The rows to record, ``LongTensor [k]``: whole prompt groups in the order their first row appears in the batch,
    as long as they fit in ``max_samples`` rows (so the viewer can show a prompt's completions side by side), each
    group's rows in batch order; when the first group alone is larger, its first ``max_samples`` rows."""
    if max_samples < 1:
        raise ValueError(f"max_samples must be >= 1, got {max_samples}")
    n = group_index.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    group_index = group_index.cpu()
    _, group = torch.unique(group_index, return_inverse=True)
    rows = torch.arange(n)
    first_row = torch.full((int(group.max()) + 1,), n, dtype=torch.long).scatter_reduce(0, group, rows, "amin")
    rank = torch.argsort(torch.argsort(first_row))  # each group's place in order of appearance
    row_rank = rank[group]
    fitting = int((torch.cumsum(torch.bincount(row_rank), 0) <= max_samples).sum())
    if fitting == 0:  # the first group alone is larger than max_samples
        return rows[row_rank == 0][:max_samples]
    taken = rows[row_rank < fitting]
    return taken[torch.argsort(row_rank[taken], stable=True)]


@torch.no_grad()
def token_entropy(model: torch.nn.Module, batch: RolloutBatch, loss: LossComponents) -> Tensor:
    """``float32 [N, R]`` (CPU): the policy's entropy at each of ``batch``'s response tokens from one no-grad pass of
    the training forward (layout, precision, temperature and chunking of ``loss``); 0 at tokens the forward does
    not score (padding, an agent's environment tokens)."""
    entropy = torch.zeros(batch.loss_mask.shape, dtype=torch.float32)
    if not bool(batch.response_mask.any()):  # nothing to score
        return entropy
    trimmed = batch.trimmed()
    # eager even where train.compile compiled the layers: a no-grad graph would cost one more compilation for this
    # one diagnostic pass per recorded step (the values equal the compiled forward's to float rounding)
    with torch.compiler.set_stance("force_eager"), autocast(loss.precision, next(model.parameters()).device):
        _, ent = response_logprobs(
            model, trimmed, loss.forward, temperature=loss.temperature, with_entropy=True, chunk_size=loss.chunk_size
        )
    entropy[:, : ent.shape[1]] = ent.float().cpu()
    return entropy


def round_significant(values: Tensor, digits: int = SIGNIFICANT_DIGITS) -> Tensor:
    """``values`` (float64) rounded to ``digits`` significant digits; zeros, NaN and infinities unchanged. Scales are
    exact powers of ten up to 1e22, so a rounded value prints as its short decimal."""
    x = values.detach().double()
    decimals = (digits - 1 - torch.floor(torch.log10(x.abs()))).nan_to_num(0.0, posinf=0.0, neginf=0.0)
    up, down = 10.0 ** decimals.clamp(min=0), 10.0 ** (-decimals).clamp(min=0)
    return torch.round(x * up / down) * down / up


def _finite_or_none(values: list[float]) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def _json_rows(values: Tensor, lengths: list[int]) -> list[list[float | None]]:
    """Each row of ``values [k, R]`` up to its length, rounded (:func:`round_significant`); non-finite values null."""
    rounded = round_significant(values)
    rows = [row[:n] for row, n in zip(rounded.tolist(), lengths, strict=True)]
    return rows if bool(torch.isfinite(rounded).all()) else [_finite_or_none(row) for row in rows]


def _response_lengths(response_mask: Tensor) -> Tensor:
    """``[N]``: one past each row's last response token (0 for an empty row): the row's width without padding."""
    present = response_mask.bool()
    last = present.shape[1] - present.flip(1).to(torch.uint8).argmax(1)
    return torch.where(present.any(1), last, torch.zeros_like(last))


def _single_step_anchors(samples: RolloutBatch) -> list[int | None]:
    """Each sample's anchor group (the step table's ``anchor``) when it holds exactly one environment step (per-step
    prompts), else ``None`` (single-turn samples; a conversation's sample holds several steps with their own)."""
    if samples.steps is None:
        return [None] * samples.num_samples
    steps = samples.steps
    count = torch.bincount(steps.sample, minlength=samples.num_samples)
    anchor = torch.full((samples.num_samples,), -1, dtype=torch.long).scatter(0, steps.sample, steps.anchor.long())
    return [int(a) if c == 1 else None for a, c in zip(anchor.tolist(), count.tolist(), strict=True)]


def _step_advantage_parts(samples: RolloutBatch) -> list[list[dict[str, Any]] | None]:
    """Each sample's environment steps with the parts of their advantage (the step table's ``advantage_<part>``
    columns a step-level estimator leaves, e.g. GiGPO's ``episode`` and ``step``), in turn order:
    ``[{"turn": t, "episode": a, "step": b}, ...]``; ``None`` without such columns."""
    steps = samples.steps
    names = sorted(n for n in (steps.columns if steps is not None else {}) if n.startswith("advantage_"))
    if steps is None or not names:
        return [None] * samples.num_samples
    values = torch.stack([steps.columns[n].float() for n in names], 1)
    order = torch.argsort(steps.sample * (int(steps.index.max()) + 1 if steps.num_steps else 1) + steps.index)
    out: list[list[dict[str, Any]]] = [[] for _ in range(samples.num_samples)]
    rounded = _finite_or_none(round_significant(values[order]).flatten().tolist())
    for k, (row, turn) in enumerate(zip(steps.sample[order].tolist(), steps.index[order].tolist(), strict=True)):
        part_values = rounded[k * len(names) : (k + 1) * len(names)]
        out[row].append({"turn": turn, **{n.removeprefix("advantage_"): v for n, v in zip(names, part_values, strict=True)}})
    return out


def token_details_records(
    step: int,
    rows: Tensor,
    samples: RolloutBatch,
    entropy: Tensor,
    kept: Tensor | None,
    tokenizer: Any,
    sample_rows: Tensor | None = None,
) -> list[Record]:
    """The JSON-ready records of ``samples`` (rows ``rows`` of the trained batch, ``sample_rows`` of the step's
    collected batch; the same when not given) with their entropies ``[k, R]`` and kept mask ``[k, R]`` (or
    ``None``); the format is the module's docstring."""
    sample_rows = rows if sample_rows is None else sample_rows
    lengths = _response_lengths(samples.response_mask).tolist()
    token_ids = [row[:n] for row, n in zip(samples.response_ids.tolist(), lengths, strict=True)]
    prompt_ids = [ids[mask.bool()].tolist() for ids, mask in zip(samples.prompt_ids, samples.prompt_mask, strict=True)]
    prompts = tokenizer.batch_decode(prompt_ids, skip_special_tokens=False)
    tokens = [tokenizer.batch_decode([[t] for t in ids], skip_special_tokens=False) for ids in token_ids]
    loss_mask = [row[:n] for row, n in zip((samples.loss_mask != 0).int().tolist(), lengths, strict=True)]
    kept_rows = None if kept is None else [row[:n] for row, n in zip((kept != 0).int().tolist(), lengths, strict=True)]
    per_token = {
        "logprob": _json_rows(samples.old_logprobs, lengths),
        "entropy": _json_rows(entropy, lengths),
        "advantage": _json_rows(samples.advantages, lengths),
    }
    rewards = _finite_or_none(round_significant(samples.rewards).flatten().tolist())
    k = len(samples.reward_names)
    sequence_advantage = _finite_or_none(round_significant(row_mean(samples.advantages, samples.loss_mask)).tolist())
    anchors = _single_step_anchors(samples)
    step_parts = _step_advantage_parts(samples)
    records = []
    for i, (row, sample_row, group, trajectory, turn) in enumerate(
        zip(rows.tolist(), sample_rows.tolist(), samples.group_index.tolist(), samples.trajectory_index.tolist(),
            samples.step_index.tolist(), strict=True)
    ):
        records.append({
            "step": step, "row": row, "sample_row": sample_row, "group": group, "trajectory": trajectory, "turn": turn, "anchor": anchors[i],
            "prompt": prompts[i], "token_ids": token_ids[i], "tokens": tokens[i],
            **{name: values[i] for name, values in per_token.items()},
            "loss_mask": loss_mask[i], "kept": None if kept_rows is None else kept_rows[i],
            "rewards": dict(zip(samples.reward_names, rewards[i * k : (i + 1) * k], strict=True)),
            "sequence_advantage": sequence_advantage[i],
            **({"step_advantages": step_parts[i]} if step_parts[i] is not None else {}),
        })
    return records


@dataclass
class StepTokenDetails:
    """What one step records, captured before the update; :meth:`write` after it, with the loss mask the update
    trained each row on. A step that records nothing has no rows and :meth:`write` does nothing."""

    step: int = 0
    rows: Tensor | None = None  # rows of the trained batch; None: nothing recorded this step
    sample_rows: Tensor | None = None  # the same rows' indices in the step's collected batch
    samples: RolloutBatch | None = None
    entropy: Tensor | None = None
    tokenizer: Any = None
    sink: Callable[[list[Record]], None] | None = None
    seconds: float = 0.0

    def write(self, trained_mask: Tensor | None) -> dict[str, float]:
        """Build the records, hand them to the run's log; the step's metric ``token_details_seconds`` (capture and
        writing), or nothing on a step that records none. ``trained_mask``: the update's
        :attr:`grove.pipeline.update_seam.UpdateOutcome.trained_mask` (``None``: ``kept`` is null)."""
        if self.rows is None:
            return {}
        start = time.perf_counter()
        kept = trained_mask[self.rows.cpu()] if trained_mask is not None else None
        self.sink(token_details_records(
            self.step, self.rows, self.samples, self.entropy, kept, self.tokenizer, self.sample_rows
        ))
        return {"token_details_seconds": self.seconds + time.perf_counter() - start}


class TokenDetailsRecorder:
    """Captures and writes the per-token details of ``logging.token_details`` (every ``every``-th step, at most
    ``max_samples`` samples; :func:`records_on_step`, :func:`chosen_rows`) through ``sink``, the run log's writer."""

    def __init__(
        self, every: int, max_samples: int, loss: LossComponents, tokenizer: Any, sink: Callable[[list[Record]], None]
    ) -> None:
        self.every = every
        self.max_samples = max_samples
        self.loss = loss
        self.tokenizer = tokenizer
        self.sink = sink

    def capture(
        self, step: int, model: torch.nn.Module, batch: RolloutBatch, source_rows: Tensor | None = None
    ) -> StepTokenDetails:
        """Before the update, on a recorded step: choose the rows and compute their entropies under the policy that
        is about to be updated; on other steps an empty :class:`StepTokenDetails`. ``source_rows``: each row's
        index in the step's collected batch (the rows themselves when not given)."""
        if not records_on_step(step, self.every):
            return StepTokenDetails()
        start = time.perf_counter()
        rows = chosen_rows(batch.group_index, self.max_samples)
        samples = batch.select(rows)
        entropy = token_entropy(model, samples, self.loss)
        sample_rows = rows if source_rows is None else source_rows[rows]
        return StepTokenDetails(
            step, rows, sample_rows, samples, entropy, self.tokenizer, self.sink, time.perf_counter() - start
        )
