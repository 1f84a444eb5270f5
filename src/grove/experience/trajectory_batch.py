"""Trajectories → a :class:`grove.batch.RolloutBatch` with its :class:`grove.batch.StepTable`.

Rows are the trajectories' samples in (group, slot, sample) order: one per turn with per-step prompts,
one per trajectory (per prefix break) with the growing conversation. ``response_mask`` covers every
response token the forward must see (environment tokens included); ``loss_mask`` only the sampled ones;
``old_logprobs`` holds the sampling log-probs (0 on environment tokens); ``token_steps`` maps each sampled
token to its step. The step table's named columns come from every registered step annotator
(:mod:`grove.experience.step_annotators`).

Per sample, ``rewards`` has three columns: ``env_reward`` (the environment rewards of the steps the
sample holds), ``episode_return`` (its trajectory's) and ``invalid_penalty`` (charged to its steps). The
sample's score, what outcome estimators normalise, is ``episode_return − invalid_penalty``: verl-agent's
episode score for a per-step sample; for a whole-episode sample, the return minus all its penalties.

A vision-language policy's samples carry the pixels of the images among their tokens (``images``, one owner each).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from grove.batch import RolloutBatch, StepTable
from grove.experience import step_annotators  # noqa: F401  (registers the built-in step annotators)
from grove.experience.anchors import anchor_ids
from grove.experience.episode_records import Trajectory, Turn
from grove.registry import STEP_ANNOTATORS, Entry
from grove.vision.image_table import ImageTable

__all__ = ["REWARD_COLUMNS", "trajectories_to_batch"]

REWARD_COLUMNS = ("env_reward", "episode_return", "invalid_penalty")


def _left(rows: Sequence[Sequence], width: int, pad) -> list[list]:
    return [[pad] * (width - len(r)) + list(r) for r in rows]


def _right(rows: Sequence[Sequence], width: int, pad) -> list[list]:
    return [list(r) + [pad] * (width - len(r)) for r in rows]


def _step_table(
    step_rows: dict[str, list], turns: list[Turn], anchor_similarity: float | None, annotators: Sequence[Entry]
) -> StepTable:
    """The step table of the steps collected in ``step_rows`` (their played ``turns`` in the same order): anchor
    groups from the observations' anchor keys, and a column from each step annotator."""
    anchors = anchor_ids(
        step_rows["group"], [t.observation.anchor for t in turns], [t.observation.text for t in turns],
        anchor_similarity,
    )
    return StepTable(
        sample=torch.tensor(step_rows["sample"], dtype=torch.long),
        group=torch.tensor(step_rows["group"], dtype=torch.long),
        trajectory=torch.tensor(step_rows["trajectory"], dtype=torch.long),
        index=torch.tensor(step_rows["index"], dtype=torch.long),
        anchor=torch.tensor(anchors, dtype=torch.long),
        reward=torch.tensor(step_rows["reward"], dtype=torch.float32),
        penalty=torch.tensor(step_rows["penalty"], dtype=torch.float32),
        terminal=torch.tensor(step_rows["terminal"], dtype=torch.bool),
        columns={entry.id: entry.fn(turns) for entry in annotators},
    )


def trajectories_to_batch(
    trajectories: Sequence[Trajectory],
    group_size: int,
    *,
    pad_token_id: int = 0,
    anchor_similarity: float | None = None,
    annotators: Sequence[Entry] | None = None,
) -> tuple[RolloutBatch, torch.Tensor]:
    """``(batch, scores [N])`` of the trajectories' samples; trajectories without samples are left out.
    ``annotators``: the step annotators whose columns the step table holds (default: every registered one; a run
    passes those its front door looked up)."""
    prompts, responses, logprobs, token_turns, images = [], [], [], [], []
    sample_group, sample_traj, sample_first_turn, sample_truncated = [], [], [], []
    reward_rows, scores = [], []
    step_rows = {k: [] for k in ("sample", "group", "trajectory", "index", "reward", "penalty", "terminal")}
    step_turns: list[Turn] = []
    for traj in trajectories:
        if not traj.samples:
            continue
        group = traj.group
        trajectory_id = group * group_size + traj.slot
        step_of_turn: dict[int, int] = {}
        for sample in traj.samples:
            row = len(prompts)
            turns = sample.turns
            for t in turns:
                step_of_turn[t] = len(step_rows["sample"])
                turn = traj.turns[t]
                step_rows["sample"].append(row)
                step_rows["group"].append(group)
                step_rows["trajectory"].append(trajectory_id)
                step_rows["index"].append(t)
                step_rows["reward"].append(turn.reward)
                step_rows["penalty"].append(turn.penalty)
                step_rows["terminal"].append(t == len(traj.turns) - 1)
                step_turns.append(turn)
            prompts.append(sample.prompt_ids)
            images.append(sample.images)
            responses.append(sample.response_ids)
            logprobs.append(sample.logprobs)
            token_turns.append([step_of_turn[t] if t >= 0 else -1 for t in sample.token_turns])
            sample_group.append(group)
            sample_traj.append(trajectory_id)
            sample_first_turn.append(turns[0])
            sample_truncated.append(any(traj.turns[t].finish_reason == "length" for t in turns))
            env_reward = sum(traj.turns[t].reward for t in turns)
            penalty = sum(traj.turns[t].penalty for t in turns)
            reward_rows.append([env_reward, traj.episode_return, penalty])
            scores.append(traj.episode_return - penalty)
    if not prompts:
        raise RuntimeError("no environment produced a single step this round (all resets failed?)")
    p_width = max(len(p) for p in prompts)
    r_width = max(len(r) for r in responses)
    response_mask = torch.tensor(_right([[1] * len(r) for r in responses], r_width, 0), dtype=torch.bool)
    token_steps = torch.tensor(_right(token_turns, r_width, -1), dtype=torch.long)
    steps = _step_table(step_rows, step_turns, anchor_similarity, tuple(STEP_ANNOTATORS) if annotators is None else annotators)
    batch = RolloutBatch(
        prompt_ids=torch.tensor(_left(prompts, p_width, pad_token_id), dtype=torch.long),
        prompt_mask=torch.tensor(_left([[1] * len(p) for p in prompts], p_width, 0), dtype=torch.bool),
        response_ids=torch.tensor(_right(responses, r_width, pad_token_id), dtype=torch.long),
        response_mask=response_mask,
        loss_mask=response_mask & (token_steps >= 0),
        old_logprobs=torch.tensor(_right(logprobs, r_width, 0.0), dtype=torch.float32),
        rewards=torch.tensor(reward_rows, dtype=torch.float32),
        reward_names=REWARD_COLUMNS,
        group_index=torch.tensor(sample_group, dtype=torch.long),
        trajectory_index=torch.tensor(sample_traj, dtype=torch.long),
        step_index=torch.tensor(sample_first_turn, dtype=torch.long),
        truncated=torch.tensor(sample_truncated, dtype=torch.bool),
        steps=steps,
        token_steps=token_steps,
        images=ImageTable.of_owners(images) if any(i is not None for i in images) else None,
    )
    return batch, torch.tensor(scores, dtype=torch.float32)
