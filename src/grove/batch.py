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
* every per-token tensor is ``[N, R]`` aligned with ``response_ids``;
* ``rewards`` ``[N, K]`` is the named reward matrix (one column per objective, ``reward_names``; NaN where an
  objective does not apply to a sample) and ``reward_weights`` its ``K`` weights: the objectives travel
  separately to the reward-combination stage (:mod:`grove.core.objectives`) and the metrics.

Agent experience adds a :class:`grove.step_table.StepTable`: one row per environment step (an action the policy took),
with its trajectory, group, turn number, anchor state, reward, penalty and terminal flag, and the
per-token ``token_steps`` ``[N, R]`` saying which step produced each response token (``-1`` for
environment tokens and pads). With per-step prompts a sample holds one step; with one growing
conversation a sample holds every step of a trajectory (its environment tokens masked out of the
loss), so step-level credit (GiGPO) is computed on the step table and scattered to tokens through
``token_steps`` in either layout. Single-turn batches have no step table.

Prompts with images (a vision-language policy) carry their pixels in ``images``, an
:class:`grove.vision.image_table.ImageTable` with one owner per sample: the image tokens are prompt tokens, and every forward
over the batch passes the pixels of its samples (:func:`grove.vision.families.pixel_inputs`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from grove.step_table import StepTable, select_steps, stack_step_tables, step_kind_id
from grove.vision.image_table import ImageTable

__all__ = ["PER_TOKEN_FIELDS", "RolloutBatch", "StepTable", "concat_batches", "step_kind_id"]

PER_TOKEN_FIELDS = (
    "response_ids",
    "token_steps",
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
    ref_logprobs: Tensor | None = None
    rollout_logprobs: Tensor | None = None
    correction_weights: Tensor | None = None
    advantages: Tensor | None = None
    baseline_scores: Tensor | None = None
    sample_weights: Tensor | None = None
    steps: StepTable | None = None
    token_steps: Tensor | None = None
    reward_weights: tuple[float, ...] = ()
    metadata: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    images: ImageTable | None = None

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
            "token_steps": self.token_steps,
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
            "baseline_scores": self.baseline_scores,
            "sample_weights": self.sample_weights,
        }
        for name, t in per_sample.items():
            if t is not None and t.shape != (n,):
                raise ValueError(f"{name} shape {tuple(t.shape)} != {(n,)}")
        if self.rewards.shape != (n, len(self.reward_names)):
            raise ValueError(
                f"rewards shape {tuple(self.rewards.shape)} != {(n, len(self.reward_names))} "
                f"(reward_names={self.reward_names})"
            )
        if self.reward_weights and len(self.reward_weights) != len(self.reward_names):
            raise ValueError(
                f"{len(self.reward_weights)} reward_weights for {len(self.reward_names)} rewards {self.reward_names}"
            )
        if self.metadata and len(self.metadata) != n:
            raise ValueError(f"metadata has {len(self.metadata)} entries for {n} samples")
        if (self.steps is None) != (self.token_steps is None):
            raise ValueError("steps and token_steps go together: set both or neither")
        if self.images is not None and self.images.num_owners != n:
            raise ValueError(f"images index {self.images.num_owners} samples, the batch has {n}")
        self._check_hierarchy()

    def _check_hierarchy(self) -> None:
        """Every trajectory lies in one group; every step's row, group and trajectory agree; anchors
        never span groups; ``token_steps`` points at steps of its own row."""
        if self.num_samples == 0:
            return
        _same_within(self.trajectory_index, self.group_index, "trajectory_index", "group_index")
        st = self.steps
        if st is None:
            return
        if st.num_steps and (int(st.sample.min()) < 0 or int(st.sample.max()) >= self.num_samples):
            raise ValueError("StepTable.sample points outside the batch")
        if not torch.equal(st.group, self.group_index[st.sample]):
            raise ValueError("a step's group differs from its sample's group_index")
        if not torch.equal(st.trajectory, self.trajectory_index[st.sample]):
            raise ValueError("a step's trajectory differs from its sample's trajectory_index")
        _same_within(st.anchor, st.group, "StepTable.anchor", "StepTable.group")
        used = self.token_steps[self.token_steps >= 0]
        if used.numel():
            if int(used.max()) >= st.num_steps:
                raise ValueError("token_steps points past the step table")
            rows = torch.arange(self.num_samples, device=used.device)[:, None].expand_as(self.token_steps)
            if not torch.equal(st.sample[used], rows[self.token_steps >= 0]):
                raise ValueError("token_steps points at a step of another sample")

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
    def policy_token_mask(self) -> Tensor:
        """``[N, R]`` bool: response tokens the policy sampled (environment tokens of agent samples excluded)."""
        if self.token_steps is None:
            return self.response_mask.bool()
        return self.response_mask.bool() & (self.token_steps >= 0)

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
        if self.steps is not None:
            changes["steps"], changes["token_steps"] = select_steps(self.steps, changes["token_steps"], idx, self.num_samples)
        if self.images is not None:
            changes["images"] = self.images.select(idx)
        return dataclasses.replace(self, **changes)

    def to(self, device: torch.device | str) -> RolloutBatch:
        changes = {
            f.name: getattr(self, f.name).to(device)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        if self.steps is not None:
            changes["steps"] = self.steps.to(device)
        if self.images is not None:
            changes["images"] = self.images.to(device)
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


def _same_within(inner: Tensor, outer: Tensor, inner_name: str, outer_name: str) -> None:
    """Every segment of ``inner`` carries one value of ``outer`` (e.g. a trajectory lies in one group)."""
    if inner.numel() == 0:
        return
    pairs = torch.unique(torch.stack([inner, outer]), dim=1)
    if torch.unique(pairs[0]).numel() != pairs.shape[1]:
        raise ValueError(f"inconsistent hierarchy: one {inner_name} value spans several {outer_name} values")


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
    if len({b.reward_weights for b in batches}) != 1:
        raise ValueError("batches disagree on reward_weights")
    first = batches[0]
    changes: dict[str, Any] = {
        "prompt_ids": _pad_cat([b.prompt_ids for b in batches], left=True, value=pad_token_id),
        "prompt_mask": _pad_cat([b.prompt_mask for b in batches], left=True),
        "response_ids": _pad_cat([b.response_ids for b in batches], left=False, value=pad_token_id),
        "metadata": tuple(m for b in batches for m in b.metadata),
    }
    for name in PER_TOKEN_FIELDS[1:]:
        if name == "token_steps":
            continue
        values = [getattr(b, name) for b in batches]
        if any(v is None for v in values):
            if not all(v is None for v in values):
                raise ValueError(f"{name} is set in some batches and not others")
            continue
        changes[name] = _pad_cat(values, left=False)
    for name in (
        "rewards", "group_index", "trajectory_index", "step_index", "truncated", "baseline_scores",
        "sample_weights",
    ):
        values = [getattr(b, name) for b in batches]
        if all(v is None for v in values):
            continue
        if any(v is None for v in values):
            raise ValueError(f"{name} is set in some batches and not others")
        changes[name] = torch.cat(values, dim=0)
    if any(b.steps is not None for b in batches):
        if any(b.steps is None for b in batches):
            raise ValueError("steps is set in some batches and not others")
        changes["steps"], changes["token_steps"] = _concat_steps(batches)
    if any(b.images is not None for b in batches):
        changes["images"] = ImageTable.of_owners([b.images for b in batches], [b.num_samples for b in batches])
    return dataclasses.replace(first, **changes)


def _concat_steps(batches: list[RolloutBatch]) -> tuple[StepTable, Tensor]:
    """Step tables stacked with their ``sample`` ids and ``token_steps`` shifted past earlier batches.
    Anchor ids are renumbered densely over (batch, anchor), so anchors of different batches never pool."""
    tables, tokens = [], []
    row_offset = step_offset = anchor_offset = 0
    for b in batches:
        st = b.steps
        anchor = st.anchor + anchor_offset
        tables.append(dataclasses.replace(st, sample=st.sample + row_offset, anchor=anchor))
        tokens.append(torch.where(b.token_steps >= 0, b.token_steps + step_offset, b.token_steps))
        row_offset += b.num_samples
        step_offset += st.num_steps
        anchor_offset += int(st.anchor.max()) + 1 if st.num_steps else 0
    return stack_step_tables(tables), _pad_cat(tokens, left=False, value=-1)
