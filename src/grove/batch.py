"""The typed rollout batch: the contract between rollout, rewards, advantages and the loss.

A :class:`RolloutBatch` holds ``N`` samples. A *sample* is one policy generation: a whole
completion for single-turn tasks, one turn (step) of a trajectory for multi-turn agents. The
hierarchy prompt group → trajectory → step → anchor state is explicit in index tensors, so group
statistics are segment operations over those indices, never Python loops.

Layout (the same as generation, so log-probs line up exactly):

* ``prompt_ids``   ``[N, P]`` left-padded, ``prompt_mask`` marks real tokens;
* ``response_ids`` ``[N, R]`` right-padded, ``response_mask`` marks generated tokens (incl. EOS);
* ``loss_mask``    ``[N, R]`` the tokens the policy is trained on (a subset of ``response_mask``:
  environment/tool tokens or filtered samples are zero here);
* ``old_logprobs`` ``[N, R]`` the behaviour policy's log-probs used in the importance ratio: the
  rollout engine's, or a training-engine recomputation, in which case the engine's are kept in
  ``rollout_logprobs`` (for the rollout-vs-training mismatch and its correction);
* ``correction_weights`` ``[N, R]`` optional detached importance weights (TIS/MIS) multiplying the
  per-token policy loss;
* every per-token tensor is ``[N, R]`` aligned with ``response_ids``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

PER_TOKEN_FIELDS = (
    "response_ids",
    "response_mask",
    "loss_mask",
    "old_logprobs",
    "ref_logprobs",
    "rollout_logprobs",
    "correction_weights",
    "advantages",
)


@dataclass(frozen=True)
class RolloutBatch:
    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    loss_mask: Tensor
    old_logprobs: Tensor
    rewards: Tensor
    reward_names: tuple[str, ...]
    group_index: Tensor
    trajectory_index: Tensor
    step_index: Tensor
    truncated: Tensor
    anchor_index: Tensor | None = None
    ref_logprobs: Tensor | None = None
    rollout_logprobs: Tensor | None = None
    correction_weights: Tensor | None = None
    advantages: Tensor | None = None
    baseline_scores: Tensor | None = None
    metadata: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    # ------------------------------------------------------------------ checks
    def __post_init__(self) -> None:
        n, p = self.prompt_ids.shape
        r = self.response_ids.shape[1]
        per_token = {
            "response_mask": self.response_mask,
            "loss_mask": self.loss_mask,
            "old_logprobs": self.old_logprobs,
            "ref_logprobs": self.ref_logprobs,
            "rollout_logprobs": self.rollout_logprobs,
            "correction_weights": self.correction_weights,
            "advantages": self.advantages,
        }
        if self.prompt_mask.shape != (n, p):
            raise ValueError(f"prompt_mask shape {tuple(self.prompt_mask.shape)} != {(n, p)}")
        if self.response_ids.shape[0] != n:
            raise ValueError("prompt_ids and response_ids disagree on the number of samples")
        for name, t in per_token.items():
            if t is not None and t.shape != (n, r):
                raise ValueError(f"{name} shape {tuple(t.shape)} != {(n, r)}")
        per_sample = {
            "group_index": self.group_index,
            "trajectory_index": self.trajectory_index,
            "step_index": self.step_index,
            "truncated": self.truncated,
            "anchor_index": self.anchor_index,
            "baseline_scores": self.baseline_scores,
        }
        for name, t in per_sample.items():
            if t is not None and t.shape != (n,):
                raise ValueError(f"{name} shape {tuple(t.shape)} != {(n,)}")
        if self.rewards.shape != (n, len(self.reward_names)):
            raise ValueError(
                f"rewards shape {tuple(self.rewards.shape)} != {(n, len(self.reward_names))} "
                f"(reward_names={self.reward_names})"
            )
        if self.metadata and len(self.metadata) != n:
            raise ValueError(f"metadata has {len(self.metadata)} entries for {n} samples")

    # ------------------------------------------------------------------ views
    @property
    def num_samples(self) -> int:
        return self.prompt_ids.shape[0]

    @property
    def input_ids(self) -> Tensor:
        """``[N, P + R]`` prompt and response, as the model sees them."""
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> Tensor:
        return torch.cat([self.prompt_mask, self.response_mask], dim=1)

    @property
    def response_lengths(self) -> Tensor:
        return self.response_mask.sum(dim=1)

    def replace(self, **changes: Any) -> RolloutBatch:
        return dataclasses.replace(self, **changes)

    def select(self, indices: Tensor | list[int]) -> RolloutBatch:
        """The sub-batch of the given sample indices (micro-batching, down-sampling)."""
        idx = torch.as_tensor(indices, dtype=torch.long, device=self.prompt_ids.device)
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                changes[f.name] = value.index_select(0, idx)
        if self.metadata:
            changes["metadata"] = tuple(self.metadata[i] for i in idx.tolist())
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str) -> RolloutBatch:
        changes = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **changes)

    def trimmed(self) -> RolloutBatch:
        """Drop all-padding columns: left columns of the prompt, right columns of the response."""
        keep_p = self.prompt_mask.any(dim=0).nonzero()
        keep_r = self.response_mask.any(dim=0).nonzero()
        p0 = int(keep_p[0]) if len(keep_p) else self.prompt_ids.shape[1]
        r1 = int(keep_r[-1]) + 1 if len(keep_r) else 0
        changes: dict[str, Any] = {"prompt_ids": self.prompt_ids[:, p0:], "prompt_mask": self.prompt_mask[:, p0:]}
        for name in PER_TOKEN_FIELDS:
            value = getattr(self, name)
            if value is not None:
                changes[name] = value[:, :r1]
        return dataclasses.replace(self, **changes)


def _pad_cat(tensors: list[Tensor], *, left: bool, value: float | int | bool = 0) -> Tensor:
    width = max(t.shape[1] for t in tensors)
    padded = []
    for t in tensors:
        extra = width - t.shape[1]
        pad = (extra, 0) if left else (0, extra)
        padded.append(torch.nn.functional.pad(t, pad, value=value) if extra else t)
    return torch.cat(padded, dim=0)


def concat_batches(batches: list[RolloutBatch], *, pad_token_id: int = 0) -> RolloutBatch:
    """Stack batches sample-wise, padding prompts on the left and responses on the right.

    Index tensors are concatenated as they are: callers that merge independent rounds must give
    them disjoint ``group_index``/``trajectory_index`` values.
    """
    if not batches:
        raise ValueError("concat_batches needs at least one batch")
    if len({b.reward_names for b in batches}) != 1:
        raise ValueError("batches disagree on reward_names")
    first = batches[0]
    changes: dict[str, Any] = {
        "prompt_ids": _pad_cat([b.prompt_ids for b in batches], left=True, value=pad_token_id),
        "prompt_mask": _pad_cat([b.prompt_mask for b in batches], left=True),
        "response_ids": _pad_cat([b.response_ids for b in batches], left=False, value=pad_token_id),
        "metadata": tuple(m for b in batches for m in b.metadata),
    }
    for name in PER_TOKEN_FIELDS[1:]:
        values = [getattr(b, name) for b in batches]
        if any(v is None for v in values):
            if not all(v is None for v in values):
                raise ValueError(f"{name} is set in some batches and not others")
            continue
        changes[name] = _pad_cat(values, left=False)
    for name in ("rewards", "group_index", "trajectory_index", "step_index", "truncated", "anchor_index", "baseline_scores"):
        values = [getattr(b, name) for b in batches]
        if all(v is None for v in values):
            continue
        changes[name] = torch.cat(values, dim=0)
    return dataclasses.replace(first, **changes)
