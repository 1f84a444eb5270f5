"""Single-turn experience: ``prompts_per_step`` prompts of the task, G completions each, scored by the rewards.

The collection is :func:`grove.experience.completion_collection.collect_scored` (scoring, dynamic sampling,
overlong shaping; the trainer's :mod:`grove.pipeline.credit` does the rest); this source owns the prompt order (an
epoch-based :class:`grove.experience.task_sampler.TaskSampler`, checkpointed) and the held-out evaluation.
"""

from __future__ import annotations

import logging
from typing import Any

from grove.evaluation.evaluate import EvalResult, evaluate_config
from grove.experience.completion_collection import ExperienceSettings, collect_scored
from grove.experience.source import ScoredExperience, SourceContext
from grove.experience.task_sampler import TaskSampler
from grove.registry import EXPERIENCE_SOURCES
from grove.rewards.scoring import resolve_rewards
from grove.rollout.engine import check_prompts_fit, context_length, prompt_preview, rollout_sampling
from grove.rollout.prompt_encoding import EncodedPrompts, encode_prompt_batch, fit_encoded
from grove.tasks.task import Example, build_task, require_examples
from grove.vision.processors import processor_of

__all__ = ["CompletionSource"]

log = logging.getLogger("grove.experience")


class CompletionSource:
    """Prompts of ``cfg.task`` → G completions each → ``cfg.rewards`` → advantages."""

    def __init__(self, ctx: SourceContext) -> None:
        cfg = ctx.cfg
        self.ctx = ctx
        entries = ctx.plan.entries
        self.task = build_task(cfg.task, entry=entries.task.entry if entries.task is not None else None)
        # the rewards the front door's preflight resolved (a plan resolved without it resolves them here)
        self.rewards = list(ctx.plan.rewards) or resolve_rewards(cfg.rewards, [r and r.entry for r in entries.rewards])
        a = cfg.algorithm
        overlong = a.overlong
        self.settings = ExperienceSettings(
            groups=cfg.train.prompts_per_step,
            group_size=cfg.train.completions_per_prompt,
            sampling=rollout_sampling(cfg.rollout),
            rewards=self.rewards,
            max_rounds=a.dynamic_sampling.max_rounds if a.dynamic_sampling.enabled else 1,
            overlong_filter=overlong.filter,
            overlong_cache_tokens=(
                (overlong.cache_tokens or max(1, cfg.rollout.max_new_tokens // 5)) if overlong.soft_penalty else None
            ),
            overlong_max_penalty=overlong.max_penalty,
            greedy_baseline=ctx.scoring.greedy_baseline,
            pad_token_id=ctx.engine.pad_token_id,
            combiner=ctx.scoring.combiner,
            combiner_params=ctx.scoring.combiner_params,
            world=ctx.world,
        )
        require_examples(self.task, cfg.task.id)  # an empty split: an error naming the task and split
        self.sampler = TaskSampler(len(self.task.train), cfg.seed)
        self._check_prompt_lengths()

    def _check_prompt_lengths(self) -> None:
        """With ``rollout.prompt_overflow: error``, a prompt too long for the model's context is reported when the
        task loads (naming the example), not at the step that draws it."""
        cfg = self.ctx.cfg
        if cfg.rollout.prompt_overflow != "error" or processor_of(self.ctx.tokenizer) is not None:
            return  # a vision-language policy's prompts are checked as they are drawn (their image tokens counted)
        limit = context_length(getattr(self.ctx.engine, "model", None), self.ctx.tokenizer)
        eval_examples = list(self.task.eval)[: cfg.eval.max_examples]
        eval_tokens = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
        splits = [("eval", eval_examples, eval_tokens, "eval.max_new_tokens" if cfg.eval.max_new_tokens else
                   "rollout.max_new_tokens")]
        if self.ctx.training:
            splits.insert(0, ("train", self.task.train, cfg.rollout.max_new_tokens, "rollout.max_new_tokens"))
        for split, examples, new_tokens, key in splits:
            check_prompts_fit(
                self.ctx.tokenizer, [e.prompt for e in examples], context_length=limit, max_new_tokens=new_tokens,
                system_prompt=cfg.rollout.system_prompt, use_chat_template=cfg.rollout.use_chat_template,
                describe=lambda i, split=split, examples=examples: f"{split} example {i} of task {cfg.task.id!r} "
                f"({prompt_preview(examples[i].prompt)})",
                max_new_tokens_key=key,
            )

    def draw_prompts(self, count: int) -> tuple[list[Example], EncodedPrompts]:
        """The next ``count`` training examples and their encoded prompts (token ids, and the pixels of prompts with
        images), fitted to the model's context (``rollout.prompt_overflow``)."""
        cfg = self.ctx.cfg
        indices = self.sampler.next(count)
        examples = [self.task.train[i] for i in indices]
        describe = lambda k: f"train example {indices[k]} of task {cfg.task.id!r} ({prompt_preview(examples[k].prompt)})"  # noqa: E731
        prompts = encode_prompt_batch(
            self.ctx.tokenizer,
            [e.prompt for e in examples],
            system_prompt=cfg.rollout.system_prompt,
            use_chat_template=cfg.rollout.use_chat_template,
            describe=describe,
        )
        prompts, truncated = fit_encoded(
            prompts,
            context_length=context_length(getattr(self.ctx.engine, "model", None), self.ctx.tokenizer),
            max_new_tokens=cfg.rollout.max_new_tokens,
            overflow=cfg.rollout.prompt_overflow,
            describe=describe,
        )
        if truncated:
            if not getattr(self, "truncated_prompts", 0):
                log.warning(
                    "rollout.prompt_overflow: truncate_left: %d of %d training prompts of this step were too long "
                    "for the model's context and lost their first tokens (later ones are counted in the source's "
                    "truncated_prompts, not logged)", truncated, len(prompts),
                )
            self.truncated_prompts = getattr(self, "truncated_prompts", 0) + truncated
        return examples, prompts

    def collect(self, step: int) -> ScoredExperience:
        """This rank's scored completions (the logged samples are read from the step's batch after credit)."""
        return collect_scored(self.ctx.engine, self.draw_prompts, self.settings, self.ctx.generator, step=step)

    def evaluate(self, step: int | None = None) -> EvalResult:
        cfg = self.ctx.cfg
        examples = list(self.task.eval)[: cfg.eval.max_examples]
        return evaluate_config(self.ctx.engine, self.ctx.tokenizer, cfg, self.rewards, examples, training_step=step)

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


EXPERIENCE_SOURCES.register(
    "completions", summary="Single-turn: prompts of `task`, G completions each, scored by `rewards`."
)(CompletionSource)
