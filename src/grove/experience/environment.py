"""Agent experience: multi-turn episodes of an environment, as a step's :class:`ScoredExperience`.

A step plays ``train.prompts_per_step`` env groups; each group is ``train.completions_per_prompt`` (G)
copies of the environment reset to the same task and seed (tasks from an epoch-based sampler over the
environment's training tasks, seeds drawn from the run's generator, so both are part of the checkpoint).
The episodes (:func:`grove.experience.episodes.run_episodes`) become a batch with a step table
(:func:`grove.experience.trajectory_batch.trajectories_to_batch`) scored by each episode's return; the trainer's
credit assignment (:mod:`grove.pipeline.credit`) computes the advantages, as for completions.

Dynamic GiGPO (``algorithm.dynamic_sampling``, :mod:`grove.experience.dynamic_sampling`): groups whose episode
returns are all equal carry no episode-level signal; they are dropped and further rounds of groups are played until
``prompts_per_step`` informative groups exist or ``max_rounds`` is reached (then the last round's
uninformative groups fill the gap, as for completions). Evaluation plays one greedy episode per held-out
task and reports the success rate with a 95% Wilson interval and the mean number of turns.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grove.batch import RolloutBatch
from grove.core.shaping import informative_groups
from grove.envs import build_environment
from grove.evaluation.evaluate import EvalResult
from grove.evaluation.stats import AccuracyReport, SampledReport
from grove.experience.dynamic_sampling import InformativeRounds, sample_informative_rounds
from grove.experience.env_failures import EnvironmentFailedError
from grove.experience.episode_metrics import (
    anchor_metrics,
    environment_summary,
    episode_metrics,
    mask_coverage,
    rollout_timing,
)
from grove.experience.episode_records import EpisodeRun, Prompter, Trajectory
from grove.experience.episodes import EpisodeSettings, run_episodes
from grove.experience.prompters import build_prompter
from grove.experience.source import ScoredExperience, SourceContext
from grove.experience.task_sampler import TaskSampler
from grove.experience.trajectory_batch import trajectories_to_batch
from grove.infra.heartbeat import report_progress
from grove.infra.precision import autocast
from grove.registry import EXPERIENCE_SOURCES
from grove.rollout.engine import PromptTooLongError, context_length, rollout_sampling

__all__ = ["EnvironmentSource"]

log = logging.getLogger(__name__)


class EnvironmentSource:
    """Episodes of ``cfg.env`` → batch with step table → advantages."""

    def __init__(self, ctx: SourceContext) -> None:
        cfg = ctx.cfg
        if cfg.env is None:
            raise ValueError("experience_source: environment needs an `env` section")
        self.ctx = ctx
        self.env_cfg = cfg.env
        entries = ctx.plan.entries
        self.suite = build_environment(
            cfg.env.id, cfg.env.params, tokenizer=ctx.tokenizer,
            entry=entries.environment.entry if entries.environment is not None else None,
        )
        # the most tokens a turn's context and answer may have (None: unknown); read here, from the engine's model
        self.model_context = context_length(getattr(ctx.engine, "model", None), ctx.tokenizer)
        assert entries.action_parser is not None  # resolved by the front door for every environment run
        parser, parser_params = entries.action_parser.fn, entries.action_parser.params
        self.parse = lambda text, obs: parser(text, obs, parser_params)
        self.step_annotators = entries.step_annotators
        self.sampling = rollout_sampling(cfg.rollout)
        self.sampler = TaskSampler(len(self.suite.train_tasks), cfg.seed)
        # each group's environment seed: one stream shared by all ranks (like the task order), so a group starts
        # from the same state whichever rank plays it and whatever the number of ranks; checkpointed
        self.start_seeds = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 17)
        self.groups = cfg.train.prompts_per_step  # env groups per step, over all ranks
        self.world = ctx.world
        self.shard = self.world.shard(self.groups)  # this rank's groups [start, end)
        self.group_size = cfg.train.completions_per_prompt
        a = cfg.algorithm
        self.max_rounds = a.dynamic_sampling.max_rounds if a.dynamic_sampling.enabled else 1
        self.failed_steps_in_a_row = 0  # steps in which the environment failed in every copy

    # ------------------------------------------------------------------ prompts
    def _prompter(self, max_new_tokens: int) -> Prompter:
        return build_prompter(
            self.ctx.cfg, self.suite.instructions, self.ctx.tokenizer, self.model_context, max_new_tokens
        )

    def play(
        self, starts: list[tuple[int, int]], group_size: int, sampling, generator: torch.Generator | None = None
    ) -> EpisodeRun:
        """Play ``group_size`` episodes from each ``(task_id, seed)`` with this source's environment, prompts
        and parser (training, evaluation and ``benchmarks/gigpo.py calibrate`` all come through here)."""
        settings = EpisodeSettings(
            make_env=self.suite.make,
            make_prompter=lambda: self._prompter(sampling.max_new_tokens),
            parse=self.parse,
            sampling=sampling,
            max_turns=self.env_cfg.max_turns,
            invalid_penalty=self.env_cfg.invalid_action_penalty,
            env_name=self.suite.name,
            step_timeout_s=self.env_cfg.step_timeout_s,
        )
        return run_episodes(
            self.ctx.engine,
            settings,
            starts,
            group_size=group_size,
            generator=generator if generator is not None else self.ctx.generator,
        )

    def draw_starts(self) -> list[tuple[int, int]]:
        """This rank's ``(task, seed)`` starts; every rank draws the step's tasks, so the sampler stays in step."""
        tasks = [self.suite.train_tasks[i] for i in self.sampler.next(self.groups)]
        seeds = torch.randint(0, 2**31 - 1, (self.groups,), generator=self.start_seeds).tolist()
        start, end = self.shard
        return list(zip(tasks, seeds, strict=True))[start:end]

    # ------------------------------------------------------------------ one step
    def collect(self, step: int) -> ScoredExperience:
        """This rank's episodes of a step, as a batch with its step table, scored by the episode returns."""
        groups = self.shard[1] - self.shard[0]

        def play(starts: list[tuple[int, int]], round_number: int) -> _EpisodeRound:
            run = self.play(starts, self.group_size, self.sampling)
            for traj in run.trajectories:
                traj.group += (round_number - 1) * groups
            return _EpisodeRound(run, run.trajectories)

        rounds = sample_informative_rounds(
            self.draw_starts,
            play,
            lambda part: _informative(part.trajectories),
            groups=groups,
            max_rounds=self.max_rounds,
            world=self.world,
        )
        kept = [t for part in rounds.kept for t in part.trajectories]
        kept = [t for t in _renumber_groups(kept) if t.group < groups]
        _require_a_turn(kept, step, self.suite.name)
        failed_everywhere = self._count_failed_step(kept, step)
        start = time.perf_counter()
        batch, scores = trajectories_to_batch(
            kept,
            self.group_size,
            pad_token_id=self.ctx.engine.pad_token_id,
            anchor_similarity=self.env_cfg.anchor_similarity,
            annotators=self.step_annotators,
        )
        batch_seconds = time.perf_counter() - start  # the step table and anchor grouping included
        runs = [part.run for part in rounds.played]
        stats = self.world.mean_over_ranks(
            {**self._stats(kept, runs, batch, rounds), "batch_seconds": batch_seconds,
             "environment_failed_step": failed_everywhere},
            "rollout: episode statistics",
        )
        keep = self.ctx.cfg.logging.samples_per_step
        # the batch's trajectory_index, so token_details.jsonl joins its trajectory (grove view)
        samples = [{**t.record(), "trajectory_id": t.group * self.group_size + t.slot} for t in kept[:keep]]
        return ScoredExperience(
            batch,
            sum(r.generation_seconds for r in runs),
            sum(r.generated_tokens for r in runs),
            stats,
            samples,
            scores=scores,
        )

    def _count_failed_step(self, kept: list[Trajectory], step: int) -> float:
        """1.0 when the environment failed in every copy of this step (on every rank): the step has nothing to learn
        from (every return is 0), which is warned; ``train.max_skipped_steps`` such steps in a row stop the run
        with :class:`EnvironmentFailedError`. 0.0 otherwise (and the count starts again)."""
        survived = any(not t.failed for t in kept)
        if self.world.any(survived, "rollout: environment failures") or not kept:
            self.failed_steps_in_a_row = 0
            return 0.0
        self.failed_steps_in_a_row += 1
        limit = self.ctx.cfg.train.max_skipped_steps
        what = _every_copy_failed(kept)
        if self.failed_steps_in_a_row >= limit:
            raise EnvironmentFailedError(
                f"environment {self.suite.name!r} failed in every copy of {limit} steps in a row "
                f"(train.max_skipped_steps), so they had nothing to train on; in step {step} {what}; the warnings above "
                "hold the environment's traceback"
            )
        log.warning("warning: environment %r failed in every copy of step %d: %s; the step has nothing to train on",
                    self.suite.name, step, what)
        return 1.0

    def _stats(
        self, kept: list[Trajectory], runs: list[EpisodeRun], batch: RolloutBatch, rounds: InformativeRounds
    ) -> dict[str, float]:
        stats = episode_metrics(kept)
        stats.update({f"env/{k}": v for k, v in environment_summary(self.suite, kept).items()})
        stats.update(anchor_metrics(batch))
        stats.update(mask_coverage(batch))
        stats.update(rollout_timing(runs))
        steps = max(batch.steps.num_steps, 1)
        stats["forward_tokens_per_env_step"] = float(batch.prompt_mask.sum() + batch.response_mask.sum()) / steps
        stats["samples_per_episode"] = batch.num_samples / max(sum(1 for t in kept if t.samples), 1)
        if self.max_rounds > 1:
            stats.update(rounds.stats())
        return stats

    # ------------------------------------------------------------------ evaluation
    def _play_held_out(self, tasks: list[int], sampled_copies: int = 0) -> tuple[list[Trajectory], int]:
        """Held-out episodes, task ``t`` played with seed ``t``: one greedy episode per task, or ``sampled_copies``
        sampled ones at the evaluation temperature (``eval.samples``), drawn from a generator seeded by the run's
        seed alone, so that every evaluation of a run samples alike and none touches a training stream."""
        cfg = self.ctx.cfg
        sampled = sampled_copies > 0
        copies = max(1, sampled_copies)
        sampling = dataclasses.replace(
            self.sampling,
            **({"temperature": cfg.sampled_eval_temperature} if sampled else {"temperature": 0.0, "top_k": 0, "top_p": 1.0}),
            max_new_tokens=cfg.eval.max_new_tokens or self.sampling.max_new_tokens,
        )
        generator = torch.Generator().manual_seed(cfg.seed if sampled else 0)  # greedy decoding never draws
        per_batch = max(1, cfg.eval.batch_size // copies)
        trajectories: list[Trajectory] = []
        tokens = 0
        with autocast(cfg.train.precision):
            for first in range(0, len(tasks), per_batch):
                chunk = tasks[first : first + per_batch]
                run = self.play([(t, t) for t in chunk], copies, sampling, generator)
                trajectories.extend(run.trajectories)
                tokens += run.generated_tokens
                report_progress(len(trajectories), len(tasks) * copies, "held-out episodes")
        _require_an_outcome(trajectories, self.suite.name)
        return trajectories, tokens

    def _eval_metrics(self, trajectories: list[Trajectory]) -> dict[str, float]:
        m = episode_metrics(trajectories)
        return {
            "success_rate": m["success_rate"],
            "mean_turns": m["turns_per_episode"],
            "mean_return": m["episode_return_mean"],
            "invalid_action_rate": m["invalid_action_rate"],
            **environment_summary(self.suite, trajectories),
        }

    def evaluate(self, step: int | None = None) -> EvalResult:
        """Greedy episodes on the held-out tasks (and on each of the suite's extra evaluation sets, whose
        metrics are reported as ``<set>/<metric>``), up to ``eval.max_examples`` tasks per set; with
        ``eval.samples`` N, also N sampled episodes per held-out task (``sampled/...``: the success rate with its
        interval over tasks, pass@k, and the episode metrics). (``step`` is the protocol's; an environment's
        failures end their own episodes and need no step in their messages.)"""
        cfg = self.ctx.cfg
        start = time.perf_counter()
        held_out = list(self.suite.eval_tasks)[: cfg.eval.max_examples]
        trajectories, tokens = self._play_held_out(held_out)
        report = AccuracyReport.from_scores([1.0 if t.won else 0.0 for t in trajectories])
        extra = self._eval_metrics(trajectories)
        samples = [t.record() for t in trajectories]
        episodes = len(trajectories)
        if cfg.eval.samples and held_out:
            sampled, sampled_tokens = self._play_held_out(held_out, cfg.eval.samples)
            tokens += sampled_tokens
            episodes += len(sampled)
            wins = dict.fromkeys(held_out, 0)
            for t in sampled:
                wins[t.task_id] += int(t.won)
            extra.update(SampledReport.from_item_counts(wins.values(), cfg.eval.samples).record())
            extra.update({f"sampled/{k}": v for k, v in self._eval_metrics(sampled).items() if k != "success_rate"})
            extra["sampled/temperature"] = cfg.sampled_eval_temperature
            samples.extend({**t.record(), "eval_mode": "sampled"} for t in sampled)
        for name, tasks in self.suite.extra_eval_tasks.items():
            more, more_tokens = self._play_held_out(list(tasks)[: cfg.eval.max_examples])
            if not more:
                continue
            tokens += more_tokens
            episodes += len(more)
            extra.update({f"{name}/{k}": v for k, v in self._eval_metrics(more).items()})
            extra[f"{name}/episodes"] = float(len(more))
            samples.extend({**t.record(), "eval_set": name} for t in more)
        return EvalResult(
            report=report,
            samples=samples,
            seconds=time.perf_counter() - start,
            mean_length=tokens / max(episodes, 1),
            extra=extra,
        )

    def state_dict(self) -> dict[str, Any]:
        return {**self.sampler.state_dict(), "start_seeds": self.start_seeds.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        seeds = state.pop("start_seeds", None)
        self.sampler.load_state_dict(state)
        if seeds is not None:  # checkpoints from before the shared seed stream keep a fresh one
            self.start_seeds.set_state(seeds)


def _require_a_turn(trajectories: list[Trajectory], step: int, env_name: str) -> None:
    """A step needs one turn to train on. When no episode took one, say why instead of training on nothing:
    every context was too long for the model (:class:`PromptTooLongError`), or every environment copy failed before
    its first turn (:class:`EnvironmentFailedError`)."""
    if not trajectories or any(t.samples for t in trajectories):
        return
    overflows = [t.overflow for t in trajectories if t.overflow is not None]
    if overflows:
        first = overflows[0]
        raise PromptTooLongError(
            f"environment {env_name!r}: no episode of step {step} could take a turn: {len(overflows)} of "
            f"{len(trajectories)} contexts did not fit (the first is {first.described}, more than the {first.limit} "
            f"that {first.budget} leaves). Shorten the environment's instructions or observations, lower "
            "rollout.max_new_tokens or env.history, or use a model with a longer context"
        )
    raise EnvironmentFailedError(
        f"environment {env_name!r}: no episode of step {step} could take a turn: {_every_copy_failed(trajectories)}; "
        "the warnings above hold the environment's traceback"
    )


def _require_an_outcome(trajectories: list[Trajectory], env_name: str) -> None:
    """A held-out evaluation measures nothing when the environment failed in every episode: an error, not 0 %."""
    if trajectories and all(t.failed for t in trajectories):
        raise EnvironmentFailedError(
            f"environment {env_name!r}: {_every_copy_failed(trajectories)} of the held-out evaluation, so there is "
            "no success rate to report; the warnings above hold the environment's traceback"
        )


def _every_copy_failed(trajectories: list[Trajectory]) -> str:
    """``"every one of the 8 episodes failed (timeout 8; the first: ...)"``, the failures counted by kind."""
    kinds = Counter(t.error_kind or "raised" for t in trajectories if t.failed)
    first = next((t for t in trajectories if t.failed), None)
    counted = ", ".join(f"{kind} {count}" for kind, count in kinds.items())
    return (f"every one of the {len(trajectories)} episodes failed ({counted}"
            + (f"; the first: {first.error}" if first is not None else "") + ")")


@dataclass(frozen=True)
class _EpisodeRound:
    """One round's episodes (for dynamic sampling: rows are trajectories, grouped by their env group)."""

    run: EpisodeRun
    trajectories: list[Trajectory]

    def group_ids(self) -> Tensor:
        return torch.tensor([t.group for t in self.trajectories], dtype=torch.long)

    def rows(self, indices: Tensor) -> _EpisodeRound:
        return dataclasses.replace(self, trajectories=[self.trajectories[i] for i in indices.tolist()])


def _informative(trajectories: list[Trajectory]) -> Tensor:
    """``bool [n]``, per trajectory: its group's episode returns are not all equal."""
    if not trajectories:
        return torch.zeros(0, dtype=torch.bool)
    returns = torch.tensor([t.episode_return for t in trajectories], dtype=torch.float64)
    groups = torch.tensor([t.group for t in trajectories])
    return informative_groups(returns, groups)


def _renumber_groups(trajectories: list[Trajectory]) -> list[Trajectory]:
    """Groups numbered 0.. in order of appearance (kept groups of several rounds form one step)."""
    order: dict[int, int] = {}
    for t in trajectories:
        t.group = order.setdefault(t.group, len(order))
    return trajectories


EXPERIENCE_SOURCES.register(
    "environment", summary="Multi-turn: G episodes per task of `env`, one batched generate per turn."
)(EnvironmentSource)

