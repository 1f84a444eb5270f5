"""Single-turn experience: ``prompts_per_step`` prompts of the task, G completions each, scored by the rewards.

The pipeline is :func:`grove.pipeline.collect.collect_experience` (dynamic sampling, overlong shaping,
reference log-probs, KL in reward, advantages); this source owns the prompt order (an epoch-based
:class:`grove.training.prompt_sampler.PromptSampler`, checkpointed) and the held-out evaluation.
"""

from __future__ import annotations

from typing import Any

from grove.evaluation.evaluate import EvalResult, evaluate_config
from grove.experience.source import SourceContext, StepExperience
from grove.experience.task_sampler import TaskSampler
from grove.pipeline.collect import ExperienceSettings, collect_experience
from grove.registry import ADVANTAGE_ESTIMATORS, EXPERIENCE_SOURCES, REWARD_AGGREGATORS
from grove.rewards.scoring import resolve_rewards, reward_columns
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.tasks.task import build_task

__all__ = ["CompletionSource", "rollout_sampling"]


def rollout_sampling(cfg) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(
        temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_new_tokens=r.max_new_tokens, stop=tuple(r.stop)
    )


class CompletionSource:
    """Prompts of ``cfg.task`` → G completions each → ``cfg.rewards`` → advantages."""

    def __init__(self, ctx: SourceContext) -> None:
        cfg = ctx.cfg
        self.ctx = ctx
        self.task = build_task(cfg.task)
        self.rewards = resolve_rewards(cfg.rewards)
        a = cfg.algorithm
        overlong = a.overlong
        aggregation = a.reward_aggregation
        aggregator_params = aggregation.validated(REWARD_AGGREGATORS)
        if hasattr(aggregator_params, "check_objectives"):  # e.g. gated: its names must be objectives
            names = reward_columns(self.rewards)[0] + (("overlong_penalty",) if overlong.soft_penalty else ())
            aggregator_params.check_objectives(names)
        self.settings = ExperienceSettings(
            groups=cfg.train.prompts_per_step,
            completions_per_group=cfg.train.completions_per_prompt,
            sampling=rollout_sampling(cfg),
            rewards=self.rewards,
            advantage_fn=ctx.advantage_fn,
            advantage_params=ctx.advantage_params,
            max_rounds=a.dynamic_sampling.max_rounds if a.dynamic_sampling.enabled else 1,
            overlong_filter=overlong.filter,
            overlong_cache_tokens=(
                (overlong.cache_tokens or max(1, cfg.rollout.max_new_tokens // 5)) if overlong.soft_penalty else None
            ),
            overlong_max_penalty=overlong.max_penalty,
            greedy_baseline="greedy_baseline" in ADVANTAGE_ESTIMATORS.entry(a.advantage.id).requires,
            pad_token_id=ctx.engine.pad_token_id,
            aggregator=REWARD_AGGREGATORS.get(aggregation.id),
            aggregator_params=aggregator_params,
            world=ctx.world,
        )
        self.sampler = TaskSampler(len(self.task.train), cfg.seed)

    def draw_prompts(self, count: int):
        """The next ``count`` training examples and their prompt token ids."""
        cfg = self.ctx.cfg
        examples = [self.task.train[i] for i in self.sampler.next(count)]
        prompt_ids = encode_prompts(
            self.ctx.tokenizer,
            [e.prompt for e in examples],
            system_prompt=cfg.rollout.system_prompt,
            use_chat_template=cfg.rollout.use_chat_template,
        )
        return examples, prompt_ids

    def collect(self, step: int) -> StepExperience:
        exp = collect_experience(
            self.ctx.engine,
            self.draw_prompts,
            self.settings,
            self.ctx.generator,
            step=step,
            reference=self.ctx.reference,
            kl_in_reward=self.ctx.kl_in_reward(),
        )
        keep = self.ctx.cfg.logging.samples_per_step
        batch = exp.batch
        samples = [
            {**meta, "rewards": dict(zip(batch.reward_names, batch.rewards[k].tolist(), strict=True))}
            for k, meta in enumerate(batch.metadata[:keep])
        ]
        return exp.with_samples(samples)

    def evaluate(self) -> EvalResult:
        cfg = self.ctx.cfg
        examples = list(self.task.eval)[: cfg.eval.max_examples]
        return evaluate_config(self.ctx.engine, self.ctx.tokenizer, cfg, self.rewards, examples)

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


EXPERIENCE_SOURCES.register(
    "completions", summary="Single-turn: prompts of `task`, G completions each, scored by `rewards`."
)(CompletionSource)
