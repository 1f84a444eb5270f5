"""Experience collection with a scripted engine, then credit: DAPO dynamic sampling, overlong handling, KL in
reward."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

import grove.builtin_components  # noqa: F401
from grove.batch import concat_batches
from grove.core.shaping import informative_groups, soft_overlong_penalty
from grove.experience.completion_collection import ExperienceSettings, collect_scored
from grove.pipeline.coefficients import EntropyController, KLController
from grove.pipeline.credit import CreditAssignment, KLInReward, StepExperience
from grove.registry import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, NoParams, Requires
from grove.rewards.scoring import resolve_reward
from grove.rollout.engine import RolloutOutput, SamplingParams
from grove.rollout.prompt_encoding import EncodedPrompts
from grove.tasks.task import Example


class ScriptedEngine:
    """Answers prompt ``k`` (its first token id) with the scripted completions ``script[k]`` (1 char = 1 token)."""

    def __init__(self, script: dict[int, list[str]], max_tokens: int = 8) -> None:
        self.script = script
        self.max_tokens = max_tokens
        self.calls = 0

    def generate(self, prompt_token_ids, n, sampling, generator) -> RolloutOutput:
        self.calls += 1
        texts, reasons, index = [], [], []
        for i, ids in enumerate(prompt_token_ids):
            for text in self.script[ids[0]][:n]:
                texts.append(text[: sampling.max_new_tokens])
                reasons.append("length" if len(text) >= sampling.max_new_tokens else "eos")
                index.append(i)
        width = max(len(t) for t in texts)
        m = len(texts)
        response = torch.zeros(m, width, dtype=torch.long)
        mask = torch.zeros(m, width, dtype=torch.long)
        for r, t in enumerate(texts):
            response[r, : len(t)] = torch.tensor([ord(c) for c in t])
            mask[r, : len(t)] = 1
        prompts = torch.tensor([prompt_token_ids[i] for i in index])
        return RolloutOutput(
            prompt_ids=prompts,
            prompt_mask=torch.ones_like(prompts),
            response_ids=response,
            response_mask=mask,
            logprobs=-0.5 * mask.float(),
            finish_reasons=reasons,
            texts=texts,
            prompt_index=torch.tensor(index),
            num_generated_tokens=int(mask.sum()),
            seconds=0.0,
        )


def make_source(order: list[int]):
    """Draws prompts with ids ``order[0], order[1], ...``; each answers '7'."""
    position = {"next": 0}

    def draw(count: int):
        ids = order[position["next"] : position["next"] + count]
        position["next"] += count
        return [Example(prompt=f"q{k}", answer="7") for k in ids], EncodedPrompts([[k, 0] for k in ids])

    return draw


@dataclass(frozen=True)
class StepSettings:
    """How a test's step collects (the source's settings) and assigns credit (the trainer's)."""

    collection: ExperienceSettings
    credit: CreditAssignment


def settings(**overrides) -> StepSettings:
    """Collection settings (two groups of two, the accuracy reward) and GRPO credit; ``advantage_fn`` and
    ``advantage_params`` go to the credit, everything else to the collection."""
    values = dict(
        groups=2,
        group_size=2,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=8),
        rewards=[resolve_reward("answer_match", {"extract": "last_number"}, 1.0, "acc")],
        advantage_fn=ADVANTAGE_ESTIMATORS.get("grpo"),
        advantage_params=ADVANTAGE_ESTIMATORS.validate_params("grpo", {}),
    )
    values.update(overrides)
    advantage_fn, advantage_params = values.pop("advantage_fn"), values.pop("advantage_params")
    collection = ExperienceSettings(**values)
    credit = CreditAssignment(
        advantage_fn=advantage_fn,
        advantage_params=advantage_params,
        combiner=collection.combiner,
        combiner_params=collection.combiner_params,
        world=collection.world,
        pad_token_id=collection.pad_token_id,
        samples_per_step=4,
    )
    return StepSettings(collection, credit)


def collect_experience(
    engine, draw, s: StepSettings, generator, *, step: int, reference=None, kl_in_reward: KLInReward | None = None
) -> StepExperience:
    """A step's scored completions with credit assigned, as the trainer runs them."""
    credit = dataclasses.replace(s.credit, reference=reference, kl_in_reward=lambda: kl_in_reward)
    return credit(collect_scored(engine, draw, s.collection, generator, step=step))


# prompts 0..3 always right or always wrong (zero variance); 10, 11, 12 mixed
SCRIPT = {0: ["7", "7"], 1: ["1", "2"], 2: ["7", "7"], 3: ["5", "5"], 10: ["7", "1"], 11: ["2", "7"], 12: ["7", "x"]}


def test_without_dynamic_sampling_one_round_keeps_everything():
    engine = ScriptedEngine(SCRIPT)
    exp = collect_experience(engine, make_source([0, 10]), settings(), torch.Generator(), step=1)
    assert engine.calls == 1
    assert exp.batch.num_samples == 4
    torch.testing.assert_close(exp.scores, torch.tensor([1.0, 1.0, 1.0, 0.0]))
    # group 0 is constant → zero advantage; group 1: rewards [1, 0], mean 0.5, unbiased std 0.7071
    # → A = ±0.5 / (0.7071 + 1e-6) = ±0.70710
    adv = exp.batch.advantages[:, 0]
    assert adv[:2].abs().max() == 0
    torch.testing.assert_close(adv[2:], torch.tensor([0.70710, -0.70710]), atol=1e-5, rtol=0)


def test_dynamic_sampling_keeps_only_informative_groups_when_enough_exist():
    engine = ScriptedEngine(SCRIPT)
    draw = make_source([0, 10, 1, 11, 2, 12])
    exp = collect_experience(engine, draw, settings(max_rounds=3), torch.Generator(), step=1)
    assert engine.calls == 2  # round 1 gives one informative group, round 2 another
    assert informative_groups(exp.scores, exp.batch.group_index).all()
    assert exp.batch.group_index.unique().numel() == 2
    assert exp.stats["dynamic_sampling_rounds"] == 2 and exp.stats["dynamic_sampling_filled_groups"] == 0
    assert [m["prompt"] for m in exp.batch.metadata] == ["q10", "q10", "q11", "q11"]


def test_dynamic_sampling_fills_with_zero_variance_groups_after_max_rounds():
    engine = ScriptedEngine(SCRIPT)
    exp = collect_experience(engine, make_source([0, 1, 2, 10]), settings(max_rounds=2), torch.Generator(), step=1)
    assert engine.calls == 2
    assert exp.batch.group_index.unique().numel() == 2
    assert exp.stats["dynamic_sampling_filled_groups"] == 1
    assert informative_groups(exp.scores, exp.batch.group_index).sum() == 2  # the one mixed group


def test_overlong_soft_penalty_column_and_filter():
    script = {0: ["7", "77777777"], 1: ["123456 7", "7"]}  # 8 chars = cut at max_new_tokens
    s = settings(overlong_filter=True, overlong_cache_tokens=4, overlong_max_penalty=1.0)
    exp = collect_experience(ScriptedEngine(script), make_source([0, 1]), s, torch.Generator(), step=1)
    b = exp.batch
    assert b.reward_names == ("acc", "overlong_penalty")
    # lengths 1, 8, 8, 1 with L_max 8, cache 4: penalties 0, -1, -1, 0
    torch.testing.assert_close(b.rewards[:, 1], torch.tensor([0.0, -1.0, -1.0, 0.0]))
    torch.testing.assert_close(exp.scores, b.rewards[:, 0] + b.rewards[:, 1])
    assert b.truncated.tolist() == [False, True, True, False]
    assert b.loss_mask[1].sum() == 0 and b.loss_mask[2].sum() == 0 and b.loss_mask[0].sum() == 1


def test_soft_overlong_penalty_values():
    lengths = torch.tensor([0, 12, 13, 14, 16, 17])
    got = soft_overlong_penalty(lengths, max_length=16, cache_length=4, max_penalty=2.0)
    torch.testing.assert_close(got, torch.tensor([0.0, 0.0, -0.5, -1.0, -2.0, -2.0]))
    with pytest.raises(ValueError):
        soft_overlong_penalty(lengths, max_length=4, cache_length=5)


def test_kl_in_reward_subtracts_beta_times_sequence_kl():
    engine = ScriptedEngine({0: ["7", "12"]})
    s = settings(groups=1, advantage_fn=ADVANTAGE_ESTIMATORS.get("dr_grpo"), advantage_params=NoParams())
    ref = lambda b: torch.zeros_like(b.old_logprobs)  # noqa: E731  rollout logp is -0.5 per token
    exp = collect_experience(
        engine, make_source([0]), s, torch.Generator(), step=1, reference=ref,
        kl_in_reward=KLInReward(KL_ESTIMATORS.get("k1"), 0.1),
    )
    # k1 = logp - ref = -0.5 per token; sequence KL = -0.5 and -1.0; score = acc - 0.1 * KL
    torch.testing.assert_close(exp.scores, torch.tensor([1.0 + 0.05, 0.0 + 0.10]))
    assert exp.batch.ref_logprobs is not None


def test_concat_batches_pads_prompts_left_and_responses_right():
    engine = ScriptedEngine({0: ["7", "7"], 1: ["1234", "5"]})
    a = collect_experience(engine, make_source([0]), settings(groups=1), torch.Generator(), step=1).batch
    b = collect_experience(engine, make_source([1]), settings(groups=1), torch.Generator(), step=1).batch
    b = b.replace(prompt_ids=torch.cat([b.prompt_ids, b.prompt_ids], 1), prompt_mask=torch.ones(2, 4, dtype=torch.bool))
    both = concat_batches([a, b])
    assert both.prompt_ids.shape == (4, 4) and both.response_ids.shape == (4, 4)
    assert both.prompt_mask[:2, :2].sum() == 0 and both.prompt_mask[:2, 2:].all()  # left padding
    assert both.response_mask[0].tolist() == [True, False, False, False]
    assert both.response_ids[2].tolist() == [ord(c) for c in "1234"]


def test_adaptive_kl_controller_moves_towards_target():
    c = KLController(coef=0.1, adaptive=True, target=0.1, horizon=100)
    c.update(observed_kl=0.2, num_samples=10)  # error clipped to +0.2
    assert c.coef == pytest.approx(0.1 * (1 + 0.2 * 10 / 100))
    c.update(observed_kl=0.09, num_samples=10)  # error -0.1
    assert c.coef == pytest.approx(0.1 * 1.02 * (1 - 0.1 * 10 / 100))
    fixed = KLController(coef=0.1)
    fixed.update(5.0, 10)
    assert fixed.coef == 0.1


def test_adaptive_entropy_controller():
    c = EntropyController(coef=0.0, target=0.5, step=0.01, max_coef=0.015)
    assert c.active_coef() == 0.0
    c.update(0.2)  # below target: more bonus, active
    assert c.coef == pytest.approx(0.01) and c.active_coef() == pytest.approx(0.01)
    c.update(0.3)
    assert c.coef == pytest.approx(0.015)  # clamped at max_coef
    c.update(0.9)  # above target: less bonus, inactive
    assert c.coef == pytest.approx(0.005) and c.active_coef() == 0.0
    restored = EntropyController(coef=0.0, target=0.5)
    restored.load_state_dict(c.state_dict())
    assert restored.coef == c.coef and restored.last_entropy == 0.9


def test_remax_uses_the_greedy_completion_reward_as_baseline():
    from grove.registry import ADVANTAGE_ESTIMATORS

    assert ADVANTAGE_ESTIMATORS.entry("remax").needs(Requires.GREEDY_BASELINE)

    class GreedyAware(ScriptedEngine):
        def generate(self, prompt_token_ids, n, sampling, generator):
            if sampling.temperature == 0:  # the greedy baseline: prompt 0 greedy is right, prompt 1 wrong
                return super().generate([[k + 100, 0] for k, _ in prompt_token_ids], n, sampling, generator)
            return super().generate(prompt_token_ids, n, sampling, generator)

    script = {0: ["7", "1"], 1: ["7", "7"], 100: ["7"], 101: ["3"]}
    s = settings(advantage_fn=ADVANTAGE_ESTIMATORS.get("remax"), advantage_params=NoParams(), greedy_baseline=True)
    engine = GreedyAware(script)
    exp = collect_experience(engine, make_source([0, 1]), s, torch.Generator(), step=1)
    assert engine.calls == 2
    torch.testing.assert_close(exp.batch.baseline_scores, torch.tensor([1.0, 1.0, 0.0, 0.0]))
    # A = r - b: [1-1, 0-1, 1-0, 1-0]
    torch.testing.assert_close(exp.batch.advantages[:, 0], torch.tensor([0.0, -1.0, 1.0, 1.0]))


TIED = {20: ["7xx", "ab"], 21: ["7", "7"], 22: ["7", "xxx"]}  # 20: objectives (1,0) vs (0,1): the sums tie


@pytest.mark.parametrize(
    ("combiner", "estimator", "kept_prompts", "filled"),
    [("sum_then_normalize", "grpo", ["q22", "q21"], 1.0), ("normalize_then_sum", "score_as_advantage", ["q20", "q22"], 0.0)],
)
def test_dynamic_sampling_looks_at_the_components_under_gdpo(combiner, estimator, kept_prompts, filled):
    from grove.registry import REWARD_COMBINERS

    s = settings(
        max_rounds=2,
        rewards=[resolve_reward("user_rewards:two_checks")],
        combiner=REWARD_COMBINERS.get(combiner),
        combiner_params=REWARD_COMBINERS.validate_params(combiner, {}),
        advantage_fn=ADVANTAGE_ESTIMATORS.get(estimator),
        advantage_params=ADVANTAGE_ESTIMATORS.validate_params(estimator, {}),
    )
    exp = collect_experience(ScriptedEngine(TIED), make_source([20, 21, 22, 21]), s, torch.Generator(), step=1)
    prompts = [m["prompt"] for m in exp.batch.metadata[::2]]
    assert prompts == kept_prompts
    assert exp.stats["dynamic_sampling_filled_groups"] == filled
    assert exp.batch.reward_names == ("has_seven", "short") and exp.batch.reward_weights == (1.0, 1.0)
    assert "objective/has_seven/signal_group_fraction" in exp.stats
