"""``train.skip_zero_advantage``: samples whose advantages are all zero are left out of the update's forward and
backward, and the update is the same as computing them (weights after AdamW steps, loss, gradient norm, the
gradient-token count), for every policy loss and aggregation that declares it; it applies only where that holds;
a mini-batch without any signal still steps the optimizer; a rank without a signal runs the other ranks' number of
micro-batches with weight 0."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from grove.batch import RolloutBatch
from grove.core.losses import PolicyLossInput, PolicyLossOutput
from grove.core.losses.ppo_clip import PPOClipParams, ppo_clip
from grove.distributed.strategies import Strategy
from grove.distributed.world import World
from grove.pipeline.loss_token_filter import EVERY_LOSS_TOKEN
from grove.pipeline.micro_batches import samples_with_signal
from grove.pipeline.token_selection import TopScoreTokens
from grove.pipeline.update import (
    Coefficients,
    LossComponents,
    PolicyUpdate,
    UpdateSchedule,
)
from grove.pipeline.update_seam import UpdateContext
from grove.registry import LOSS_AGGREGATIONS, POLICY_LOSSES, NoParams
from grove.resolve import load_config, resolve
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine

SKIPPABLE_LOSSES = [e.id for e in POLICY_LOSSES if e.zero_advantage_rows_skippable]
SKIPPABLE_AGGREGATIONS = [e.id for e in LOSS_AGGREGATIONS if e.zero_advantage_rows_skippable]
SEEN_ROWS: list[list[int]] = []


@POLICY_LOSSES.register("test_rows_seen_loss", summary="ppo_clip that records which samples it was given",
                        zero_advantage_rows_skippable=True)
def rows_seen_loss(inputs: PolicyLossInput, params: NoParams) -> PolicyLossOutput:
    if inputs.loss_mask.shape[1] > 1:  # not the update's probe of the statistic names (one masked token)
        SEEN_ROWS.append((inputs.trajectory_index - 100).tolist())
    return ppo_clip(inputs, PPOClipParams())


@pytest.fixture(scope="module")
def batch(policy) -> RolloutBatch:
    """Three prompts × 3 completions: the first prompt's group has zero advantages (one reward for all), the
    others random per-token advantages; one sample of the last group has no loss tokens."""
    model, tokenizer = policy
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Name a colour.", "Count to 3."], system_prompt=None,
                         use_chat_template=True)
    out = TransformersEngine(model, tokenizer).generate(
        ids, 3, SamplingParams(temperature=1.0, max_new_tokens=6), torch.Generator().manual_seed(3)
    )
    n = out.response_ids.shape[0]
    adv = torch.randn(n, 6, generator=torch.Generator().manual_seed(4)) * out.response_mask
    adv[:3] = 0.0
    loss_mask = out.response_mask.bool().clone()
    loss_mask[8] = False
    return RolloutBatch(
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, response_ids=out.response_ids,
        response_mask=out.response_mask, loss_mask=loss_mask, old_logprobs=out.logprobs,
        rewards=torch.zeros(n, 1), reward_names=("r",), group_index=out.prompt_index,
        trajectory_index=torch.arange(n) + 100, step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool), advantages=adv.float(),
    )


def _parts(loss: str, aggregation: str, skip: bool) -> LossComponents:
    return LossComponents(
        policy_loss=POLICY_LOSSES.get(loss), policy_params=POLICY_LOSSES.validate_params(loss, {}),
        loss_aggregation=LOSS_AGGREGATIONS.get(aggregation), kl_estimator=None, temperature=1.0, max_response_length=6,
        forward="packed", skip_zero_advantage=skip,
    )


def _train(model, batches: list[RolloutBatch], parts: LossComponents, micro: int = 2, strategy=None,
           coefs: Coefficients | None = None, tokens=EVERY_LOSS_TOKEN):
    """AdamW steps (weight decay on) from the model's current weights, one per batch; returns the weights after
    them and each step's metrics; the model is restored. AdamW's ``eps`` is large so that its update stays smooth in
    the gradient: with ``1e-8`` a gradient element that is zero up to rounding becomes a ±lr step either way."""
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, eps=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    context = UpdateContext(model, opt, sched, strategy or Strategy("none", World()))
    update = PolicyUpdate(context, parts, UpdateSchedule(1, 1, micro, 1.0))
    metrics = [update.step(b, coefs or Coefficients(), tokens).metrics for b in batches]
    after = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(initial)
    return after, metrics


def _assert_same_update(a, b) -> None:
    (weights_a, metrics_a), (weights_b, metrics_b) = a, b
    for name in weights_a:
        torch.testing.assert_close(weights_a[name], weights_b[name], rtol=1e-5, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    for ma, mb in zip(metrics_a, metrics_b, strict=True):
        for key in ("loss", "grad_norm", "grad_tokens", "grad_tokens_with_signal"):
            assert ma[key] == pytest.approx(mb[key], rel=1e-5, abs=1e-7), key


def test_samples_with_signal(batch):
    assert samples_with_signal(batch).tolist() == [False] * 3 + [True] * 5 + [False]


@pytest.mark.parametrize("aggregation", SKIPPABLE_AGGREGATIONS)
@pytest.mark.parametrize("loss", SKIPPABLE_LOSSES)
def test_leaving_zero_advantage_samples_out_changes_no_update(policy, batch, loss, aggregation):
    model, _ = policy
    computed = _train(model, [batch], _parts(loss, aggregation, skip=False))
    skipped = _train(model, [batch], _parts(loss, aggregation, skip=True))
    _assert_same_update(skipped, computed)
    assert computed[1][0]["zero_advantage_samples_skipped"] == 0
    assert skipped[1][0]["zero_advantage_samples_skipped"] == 4  # the first group and the sample without loss tokens
    assert skipped[1][0]["trained_tokens"] < computed[1][0]["trained_tokens"]


@pytest.mark.parametrize("aggregation", SKIPPABLE_AGGREGATIONS)
def test_the_skip_under_per_completion_token_selection_changes_no_update(policy, batch, aggregation):
    """D^3S token selection within each completion: a left-out sample's kept tokens still count in the loss scale
    and in the gradient-token count, with a zero gradient; the kept fraction is over every sample's tokens."""
    model, _ = policy
    tokens = TopScoreTokens("sequence", 0.5)
    parts = _parts("ppo_clip", aggregation, skip=False)
    computed = _train(model, [batch], parts, tokens=tokens)
    skipped = _train(model, [batch], dataclasses.replace(parts, skip_zero_advantage=True), tokens=tokens)
    _assert_same_update(skipped, computed)
    assert skipped[1][0]["zero_advantage_samples_skipped"] == 4 and computed[1][0]["zero_advantage_samples_skipped"] == 0
    assert skipped[1][0]["trained_tokens"] < computed[1][0]["trained_tokens"]
    kept = sum(math.ceil(0.5 * n) for n in batch.loss_mask.sum(1).tolist())
    assert computed[1][0]["grad_tokens"] == skipped[1][0]["grad_tokens"] == kept
    frac = kept / float(batch.loss_mask.sum())
    assert computed[1][0]["selection/kept_tokens_frac"] == pytest.approx(frac)
    assert skipped[1][0]["selection/kept_tokens_frac"] == pytest.approx(frac)
    across = TopScoreTokens("micro_batch", 0.5)  # ranks them together
    skipping = dataclasses.replace(parts, skip_zero_advantage=True)
    assert _train(model, [batch], skipping, tokens=across)[1][0]["zero_advantage_samples_skipped"] == 0


def test_the_skipped_samples_are_not_computed(policy, batch):
    model, _ = policy
    SEEN_ROWS.clear()
    _train(model, [batch], _parts("test_rows_seen_loss", "token_mean", skip=True), micro=9)
    assert sorted(sum(SEEN_ROWS, [])) == [3, 4, 5, 6, 7]


def test_a_mini_batch_without_signal_still_steps_the_optimizer(policy, batch):
    """AdamW after a zero gradient still moves the weights (momentum, weight decay): the skip sets the gradients to
    zero instead of running nothing."""
    model, _ = policy
    silent = dataclasses.replace(batch, advantages=torch.zeros_like(batch.advantages))
    parts = _parts("ppo_clip", "token_mean", skip=False)
    computed = _train(model, [batch, silent], parts)
    skipped = _train(model, [batch, silent], dataclasses.replace(parts, skip_zero_advantage=True))
    _assert_same_update(skipped, computed)
    assert skipped[1][1]["zero_advantage_samples_skipped"] == 9 and skipped[1][1]["trained_tokens"] == 0
    assert skipped[1][1]["grad_norm"] == 0.0
    assert math.isnan(skipped[1][1]["clip_frac"]) and math.isnan(skipped[1][1]["entropy"])  # not measured


@dataclasses.dataclass(frozen=True)
class _BusierRanks(World):
    """One process that answers the micro-batch count as if another rank had ``others`` micro-batches."""

    others: int = 0

    def max_int(self, value: int, phase: str) -> int:
        return max(value, self.others) if phase == "update: micro-batch count" else value


def test_a_rank_without_signal_runs_the_other_ranks_micro_batch_count_with_weight_zero(policy, batch):
    model, _ = policy
    silent = dataclasses.replace(batch, advantages=torch.zeros_like(batch.advantages))
    SEEN_ROWS.clear()
    strategy = Strategy("none", _BusierRanks(others=3))
    (weights, metrics) = _train(model, [silent], _parts("test_rows_seen_loss", "token_mean", skip=True),
                                strategy=strategy)
    shortest = int(torch.argmin(batch.response_lengths + batch.prompt_mask.sum(1)))
    assert SEEN_ROWS == [[shortest]] * 3  # three forwards of one sample, as many as the busiest rank
    assert metrics[0]["grad_norm"] == 0.0 and metrics[0]["trained_tokens"] == 0


def _plan(overrides, path=None):
    return resolve(load_config(path, overrides), preflight_checks=False)


def test_the_skip_applies_only_where_it_is_exact():
    default = _plan([])
    assert default.skip_zero_advantage_blocker is None and default.components.loss.skip_zero_advantage
    assert set(SKIPPABLE_LOSSES) - {"test_rows_seen_loss"} == {"ppo_clip", "gspo", "gmpo", "cispo", "sapo", "reinforce"}
    assert set(SKIPPABLE_AGGREGATIONS) == {"token_mean", "seq_mean_token_sum", "seq_mean_token_mean",
                                           "seq_mean_token_sum_norm"}
    for overrides, reason in (
        (["train.skip_zero_advantage=false"], "is false"),
        (["algorithm.policy_loss={id: clip_cov}"], "'clip_cov' does not declare"),  # a covariance over the micro-batch
        (["algorithm.policy_loss={id: kl_cov}"], "'kl_cov' does not declare"),
        (["algorithm.aggregation=micro_token_mean"], "'micro_token_mean' does not declare"),  # a per-micro-batch mean
        (["algorithm.kl.coef=0.1"], "algorithm.kl"),  # the KL term has a gradient whatever the advantage
        (["algorithm.entropy.coef=0.01"], "algorithm.entropy"),
        (["algorithm.entropy={coef: 0.0, target: 0.5}"], "algorithm.entropy"),  # the controller reads the entropy
        (["selection={tokens: {scope: micro_batch, ratio: 0.5}}"], "selection.tokens.scope"),
        (["selection={tokens: {scope: batch, ratio: 0.5}}"], "selection.tokens.scope"),
    ):
        plan = _plan(overrides)
        assert reason in (plan.skip_zero_advantage_blocker or ""), overrides
        assert not plan.components.loss.skip_zero_advantage
    assert _plan(["algorithm.kl={coef: 0.1, placement: reward}"]).skip_zero_advantage_blocker is None
    # D^3S as examples/arithmetic.yaml runs it (no KL in the loss, tokens ranked within each completion)
    d3s = _plan(["selection={tokens: {scope: sequence, ratio: 0.5}}"], "examples/arithmetic.yaml")
    assert d3s.skip_zero_advantage_blocker is None and d3s.components.loss.skip_zero_advantage


def test_config_show_says_whether_the_skip_applies():
    from test_train_e2e import run_cli

    assert "leaves zero-advantage samples out" in run_cli(["config", "show", "--no-memory"]).output
    shown = run_cli(["config", "show", "--no-memory", "--set", "algorithm.kl.coef=0.1"]).output
    assert "computes every sample: the KL term in the loss" in shown


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_a_run_whose_rewards_all_agree_trains_and_logs_every_metric(tiny_model, tmp_path):
    """From the CLI with the defaults: the tiny model's rewards are all 0, so no sample is computed; the run
    completes, counts the skipped samples, logs the loss's statistics as NaN (not measured; null in metrics.jsonl) and checkpoints."""
    from test_train_e2e import base_overrides, metric_rows, run_cli

    out = tmp_path / "run"
    args = base_overrides(tiny_model, out, **{"train.skip_zero_advantage": True, "train.steps": 2,
                                              "eval.before_training": False})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["zero_std_group_fraction"] == 1.0 and row["zero_advantage_samples_skipped"] == 12  # 4 × 3
        assert row["trained_tokens"] == 0 and row["grad_norm"] == 0 and row["loss"] == 0
        assert row["clip_frac"] is None and row["entropy"] is None  # NaN, written as null in metrics.jsonl
    assert (out / "checkpoints" / "step-000002").exists()
