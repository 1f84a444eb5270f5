"""One step's experience: prompts → G completions each → rewards → typed batch → advantages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from pydantic import BaseModel

from grove.batch import RolloutBatch
from grove.rewards.loading import RewardSpec, combine_rewards, compute_rewards
from grove.rollout.base import RolloutEngine, SamplingParams
from grove.tasks.base import Example


def prompt_text(example: Example) -> str:
    """The prompt as reward functions see it: the string, or the last user message of a chat."""
    if isinstance(example.prompt, str):
        return example.prompt
    users = [m["content"] for m in example.prompt if m.get("role") == "user"]
    return users[-1] if users else ""


@dataclass(frozen=True)
class StepExperience:
    batch: RolloutBatch
    scores: torch.Tensor  # [N] combined scalar reward
    completions: list[str]
    finish_reasons: list[str]
    generation_seconds: float
    generated_tokens: int


def collect_experience(
    engine: RolloutEngine,
    examples: Sequence[Example],
    prompt_token_ids: list[list[int]],
    *,
    n: int,
    sampling: SamplingParams,
    generator: torch.Generator,
    rewards: Sequence[RewardSpec],
    advantage_fn: Callable,
    advantage_params: BaseModel,
    step: int,
) -> StepExperience:
    out = engine.generate(prompt_token_ids, n, sampling, generator)
    rows = out.prompt_index.tolist()
    prompts = [prompt_text(examples[i]) for i in rows]
    columns = {key: [examples[i].columns[key] for i in rows] for key in examples[0].columns}
    reward_matrix = compute_rewards(rewards, prompts, out.texts, columns, step=step)
    scores = combine_rewards(reward_matrix, torch.tensor([r.weight for r in rewards]))
    num = len(rows)
    response_mask = out.response_mask.bool()
    batch = RolloutBatch(
        prompt_ids=out.prompt_ids,
        prompt_mask=out.prompt_mask.bool(),
        response_ids=out.response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.clone(),
        old_logprobs=out.logprobs.float(),
        rewards=reward_matrix,
        reward_names=tuple(r.name for r in rewards),
        group_index=out.prompt_index.long(),
        trajectory_index=torch.arange(num),
        step_index=torch.zeros(num, dtype=torch.long),
        truncated=torch.tensor([reason == "length" for reason in out.finish_reasons]),
        metadata=tuple(
            {"prompt": prompts[k], "completion": out.texts[k], "finish_reason": out.finish_reasons[k]}
            for k in range(num)
        ),
    )
    advantages = advantage_fn(batch, scores, advantage_params)
    return StepExperience(
        batch=batch.replace(advantages=advantages),
        scores=scores,
        completions=out.texts,
        finish_reasons=out.finish_reasons,
        generation_seconds=out.seconds,
        generated_tokens=out.num_generated_tokens,
    )
