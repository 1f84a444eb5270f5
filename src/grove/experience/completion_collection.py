"""Single-turn experience: prompts → G completions each → rewards → this rank's scored batch.

Order of operations (each optional stage is a config setting, not a trainer branch):

1. generate and score ``prompts_per_step`` groups (one *round*): the named reward matrix ``[N, K]`` (one
   column per objective) and its weights go into the batch; DAPO's soft overlong punishment is added as
   the column ``overlong_penalty``. A sample no weighted column applies to (every weighted reward returned
   ``None`` for it, or failed on it with ``on_error: skip``) cannot be scored and leaves the round (its group
   keeps its other samples; ``reward_excluded_samples``); a round left with none is an error, and so is a
   sample whose weighted rewards overflow float32;
2. DAPO dynamic sampling (:mod:`grove.experience.dynamic_sampling`): keep only groups that carry signal under the
   reward combiner (some column of its ``signal`` varies: the combined score for per-sample combiners, every
   weighted objective for GDPO/MO-GRPO) and draw further rounds until ``prompts_per_step`` such groups exist or
   ``max_rounds`` is reached;
3. DAPO overlong filtering: truncated completions get an all-zero ``loss_mask``.

The trainer's credit assignment (:mod:`grove.pipeline.credit`) then combines the objectives, subtracts KL in the
reward and computes the advantages. With several ranks (:mod:`grove.distributed`), each rank draws the same
``prompts_per_step`` prompts from the shared sampler and generates, scores and (with dynamic sampling) filters only
its own share of the groups; rounds continue until every rank has its share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel
from torch import Tensor

from grove.batch import RolloutBatch, concat_batches
from grove.core.objectives import CombineFn, informative_from_signal, run_combiner
from grove.core.objectives.pointwise import sum_then_normalize
from grove.core.shaping import soft_overlong_penalty
from grove.distributed.world import World
from grove.experience.dynamic_sampling import sample_informative_rounds
from grove.experience.round_scores import RoundScores, check_weighted_sums, nothing_to_train_on, say_left_out
from grove.pipeline.credit import ScoredExperience
from grove.rewards.scoring import RewardFunctionError, RewardSpec, compute_rewards, reward_columns
from grove.rollout.engine import RolloutEngine, RolloutOutput, SamplingParams
from grove.rollout.prompt_encoding import EncodedPrompts
from grove.tasks.task import Example, columns_for_rewards

OVERLONG_REWARD = "overlong_penalty"

#: draws the next ``count`` training examples and their encoded prompts
PromptSource = Callable[[int], tuple[list[Example], EncodedPrompts]]


@dataclass(frozen=True)
class ObjectiveScoring:
    """How a step's objectives become one score per sample, resolved once from the config
    (:attr:`grove.resolve.RunPlan.scoring`): the reward combiner with its parameters, and whether the advantage
    estimator asks for one greedy completion per prompt, scored (``requires: greedy_baseline``, e.g. ReMax)."""

    combiner: CombineFn = sum_then_normalize
    combiner_params: BaseModel | None = None  # None: the combiner takes no parameters (sum_then_normalize)
    greedy_baseline: bool = False


@dataclass(frozen=True)
class ExperienceSettings:
    groups: int
    group_size: int
    sampling: SamplingParams
    rewards: Sequence[RewardSpec]
    max_rounds: int = 1  # > 1: DAPO dynamic sampling
    overlong_filter: bool = False
    overlong_cache_tokens: int | None = None  # set: DAPO soft overlong punishment
    overlong_max_penalty: float = 1.0
    greedy_baseline: bool = False  # one extra greedy completion per prompt, scored (e.g. ReMax)
    pad_token_id: int = 0
    combiner: CombineFn = sum_then_normalize
    combiner_params: BaseModel | None = None  # None: the combiner takes no parameters (sum_then_normalize)
    world: World = field(default_factory=World)  # the ranks the step's groups are shared among
    notices: set[str] = field(default_factory=set, compare=False, repr=False)  # once-per-run warnings already given


@dataclass(frozen=True)
class _Round:
    """One round's scored samples, and the seconds and tokens its generation took."""

    batch: RolloutBatch
    seconds: float
    tokens: int

    def group_ids(self) -> Tensor:
        return self.batch.group_index

    def rows(self, indices: Tensor) -> _Round:
        return dataclasses.replace(self, batch=self.batch.select(indices))


def _score(
    out: RolloutOutput,
    examples: list[Example],
    s: ExperienceSettings,
    step: int,
    stats: dict[str, float] | None = None,
) -> RoundScores:
    """Score an engine output with every reward (their failure counts are added to ``stats``).

    Raises:
        RewardFunctionError: a reward failed with ``on_error: raise``, or a sample's weighted rewards overflow
            float32 (:func:`grove.experience.round_scores.check_weighted_sums`).
    """
    rows = [examples[i] for i in out.prompt_index.tolist()]
    prompts = [e.prompt_text for e in rows]
    columns = columns_for_rewards(rows, out.completion_ids)
    skipped: set[int] = set()
    rewards = compute_rewards(s.rewards, prompts, out.texts, columns, step=step, stats=stats, skipped=skipped)
    names_, weights_ = reward_columns(s.rewards)
    names, weights = list(names_), list(weights_)
    active = torch.tensor(weights_, dtype=torch.float64) != 0
    unscorable = torch.isnan(rewards[:, active]).all(dim=1)  # True for every sample when no column is weighted
    if s.overlong_cache_tokens is not None:
        penalty = soft_overlong_penalty(
            out.response_mask.sum(1),
            max_length=s.sampling.max_new_tokens,
            cache_length=s.overlong_cache_tokens,
            max_penalty=s.overlong_max_penalty,
        )
        rewards = torch.cat([rewards, penalty[:, None]], dim=1)
        names.append(OVERLONG_REWARD)
        weights.append(1.0)
        unscorable[:] = False  # the overlong column applies to every sample
    check_weighted_sums(rewards, names, weights, prompts, out.texts, step)
    return RoundScores(rewards, names, weights, prompts, unscorable, frozenset(skipped))


def combined_objectives(batch: RolloutBatch, s: ExperienceSettings):
    """The reward combiner's output on ``batch`` (scores, per-objective contributions, signal columns)."""
    return run_combiner(s.combiner, batch, s.combiner_params)


def _sample_round(
    engine: RolloutEngine,
    examples: list[Example],
    encoded: EncodedPrompts,
    s: ExperienceSettings,
    generator: torch.Generator,
    step: int,
    group_offset: int,
    stats: dict[str, float] | None = None,
) -> _Round:
    out = engine.generate(encoded.ids, s.group_size, s.sampling, generator, **encoded.image_kwargs)
    scored = _score(out, examples, s, step, stats)
    rewards, names, weights, prompts, unscorable = (
        scored.rewards, scored.names, scored.weights, scored.prompts, scored.unscorable
    )
    seconds, tokens = out.seconds, out.num_generated_tokens
    baseline = None
    if s.greedy_baseline:  # per-sample combiners only (config validation): each greedy sample is its own group
        greedy_sampling = dataclasses.replace(s.sampling, temperature=0.0, top_k=0, top_p=1.0)
        greedy = engine.generate(encoded.ids, 1, greedy_sampling, generator, **encoded.image_kwargs)
        g = _score(greedy, examples, s, step, stats)
        g_rewards = g.rewards
        g_rewards[g.unscorable] = torch.nan_to_num(g_rewards[g.unscorable], nan=0.0)  # unscorable baseline: 0
        baseline = run_combiner(s.combiner, _reward_only_batch(g_rewards, names, weights), s.combiner_params)
        baseline = baseline.scores[out.prompt_index]
        seconds, tokens = seconds + greedy.seconds, tokens + greedy.num_generated_tokens
    num = out.num_samples
    response_mask = out.response_mask.bool()
    batch = RolloutBatch(
        prompt_ids=out.prompt_ids,
        prompt_mask=out.prompt_mask.bool(),
        response_ids=out.response_ids,
        response_mask=response_mask,
        loss_mask=response_mask.clone(),
        old_logprobs=out.logprobs.float(),
        rewards=rewards,
        reward_names=tuple(names),
        reward_weights=tuple(weights),
        group_index=out.prompt_index.long() + group_offset,
        trajectory_index=torch.arange(num) + group_offset * s.group_size,
        step_index=torch.zeros(num, dtype=torch.long),
        truncated=out.truncated,
        baseline_scores=baseline,
        metadata=tuple(
            {"prompt": prompts[k], "completion": out.texts[k], "finish_reason": out.finish_reasons[k]}
            for k in range(num)
        ),
        images=out.images,
    )
    if stats is not None:
        stats["reward_excluded_samples"] = stats.get("reward_excluded_samples", 0.0) + float(unscorable.sum())
    if bool(unscorable.any()):  # no weighted reward applies to them: leave them out of the step
        if bool(unscorable.all()):
            raise RewardFunctionError(nothing_to_train_on(s.rewards, scored, step))
        say_left_out(s.rewards, s.notices, scored, step)
        batch = batch.select((~unscorable).nonzero().flatten())
    return _Round(batch, seconds, tokens)


def _reward_only_batch(rewards: Tensor, names: list[str], weights: list[float]) -> RolloutBatch:
    """A batch holding just ``rewards`` (one sample per group), for scoring with a per-sample combiner."""
    n = rewards.shape[0]
    empty = torch.zeros(n, 0, dtype=torch.long)
    return RolloutBatch(
        prompt_ids=empty, prompt_mask=empty.bool(), response_ids=empty, response_mask=empty.bool(),
        loss_mask=empty.bool(), old_logprobs=empty.float(), rewards=rewards, reward_names=tuple(names),
        reward_weights=tuple(weights), group_index=torch.arange(n), trajectory_index=torch.arange(n),
        step_index=torch.zeros(n, dtype=torch.long), truncated=torch.zeros(n, dtype=torch.bool),
    )


def _first_groups(batch: RolloutBatch, count: int) -> RolloutBatch:
    """The samples of the first ``count`` distinct groups, in order."""
    _, first_seen = torch.unique_consecutive(batch.group_index, return_inverse=True)
    keep = (first_seen < count).nonzero().flatten()
    return batch.select(keep)


def collect_scored(
    engine: RolloutEngine,
    draw: PromptSource,
    s: ExperienceSettings,
    generator: torch.Generator,
    *,
    step: int,
) -> ScoredExperience:
    """This rank's scored completions of a step (stages 1-3 of the module docstring)."""
    start, end = s.world.shard(s.groups)
    groups = end - start  # this rank's share of the step's groups
    stats: dict[str, float] = {}

    def play(drawn: tuple[list[Example], EncodedPrompts], round_number: int) -> _Round:
        examples, prompts = drawn
        return _sample_round(
            engine, examples[start:end], prompts.rows(start, end), s, generator, step,
            group_offset=(round_number - 1) * groups, stats=stats,
        )

    rounds = sample_informative_rounds(
        lambda: draw(s.groups),  # every rank draws, so the sampler stays the same on all ranks
        play,
        lambda part: _informative(part.batch, s),
        groups=groups,
        max_rounds=s.max_rounds,
        world=s.world,
    )
    batch = _first_groups(concat_batches([r.batch for r in rounds.kept], pad_token_id=s.pad_token_id), groups)
    if s.max_rounds > 1:
        stats.update(rounds.stats())
    if s.overlong_filter:
        batch = batch.replace(loss_mask=batch.loss_mask & ~batch.truncated[:, None])
        stats["overlong_filtered_fraction"] = _truncated_fraction(batch, s.world)
    return ScoredExperience(
        batch,
        sum(r.seconds for r in rounds.played),
        sum(r.tokens for r in rounds.played),
        stats,
    )


def _truncated_fraction(batch: RolloutBatch, world: World) -> float:
    """The fraction of the step's completions (over all ranks) that hit the length limit, in float32 as the
    mean of a float32 tensor gives it."""
    truncated, total = world.sum_floats(
        [float(batch.truncated.sum()), float(batch.num_samples)], "rollout: overlong statistics"
    )
    return float(torch.tensor(truncated, dtype=torch.float32) / torch.tensor(total, dtype=torch.float32))


def _informative(batch: RolloutBatch, s: ExperienceSettings) -> Tensor:
    """``bool [N]``: the sample's group carries signal under the reward combiner (component-aware)."""
    return informative_from_signal(combined_objectives(batch, s).signal, batch.group_index)
