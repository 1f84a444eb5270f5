"""D^3S in the pipeline: sample selection before the update, token selection inside it, config, presets."""

from __future__ import annotations

import json
import math

import pytest
import torch

import grove.pipeline.update as update_module
from grove.batch import RolloutBatch
from grove.core.aggregation import token_mean
from grove.core.keep_ratio_schedules import KeepRatioSchedule
from grove.core.losses.ppo_clip import PPOClipParams, ppo_clip
from grove.pipeline.downsampling import (
    SampleSelection,
    select_rollouts,
    sequence_advantages,
)
from grove.pipeline.loss_token_filter import EVERY_LOSS_TOKEN
from grove.pipeline.token_selection import (
    ScheduledTokenSelection,
    TopScoreTokens,
    select_loss_tokens,
    selected_token_count,
)
from grove.pipeline.update import Coefficients, LossComponents, PolicyUpdate, UpdateSchedule
from grove.pipeline.update_seam import UpdateContext
from grove.resolve import load_config
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine
from test_advantages_group_norm import make_test_batch
from test_train_e2e import base_overrides, metric_rows, run_cli


def _grpo(batch, scores, params):
    from grove.core.advantages import NormConfig, normalize_scores

    adv = normalize_scores(scores, batch.group_index, NormConfig())
    return adv[:, None] * batch.loss_mask


def test_select_rollouts_keeps_extremes_per_group_and_raises_variance():
    batch = make_test_batch([0] * 6 + [1] * 4, [3] * 10)
    scores = torch.tensor([0.1, 0.9, 0.5, 0.4, 0.0, 1.0, 2.0, 2.0, 0.0, 1.0])
    batch = batch.replace(advantages=_grpo(batch, scores, None))
    kept, kept_scores, stats, _ = select_rollouts(batch, scores, SampleSelection("group"), 0.5, _grpo, None)
    # group 0 keeps 3 of 6: the max-variance triple of {0.1,0.9,0.5,0.4,0.0,1.0} is {0.0, 0.1, 1.0} or
    # {0.0, 0.9, 1.0}; group 1 keeps 2 of 4: one 0.0 and one 2.0
    assert kept.num_samples == 5 and stats["selection/kept_samples_frac"] == 0.5
    assert sorted(kept_scores[kept.group_index == 1].tolist()) == [0.0, 2.0]
    g0 = sorted(kept_scores[kept.group_index == 0].tolist())
    assert g0[0] == 0.0 and g0[-1] == 1.0
    assert stats["selection/adv_var_after"] >= stats["selection/adv_var_before"]
    # 'keep' carries the full-group advantages; 'recompute' renormalises the kept subset
    torch.testing.assert_close(kept.advantages, batch.advantages[torch.isin(torch.arange(10), _rows(batch, kept))])
    again, _, _, _ = select_rollouts(batch, scores, SampleSelection("group", recompute_advantages=True), 0.5, _grpo, None)
    torch.testing.assert_close(again.advantages, _grpo(again, kept_scores, None))


def _rows(batch: RolloutBatch, kept: RolloutBatch) -> torch.Tensor:
    # identify kept rows by their (unique) sequence advantage and group
    key = sequence_advantages(batch) * 10 + batch.group_index
    kept_key = sequence_advantages(kept) * 10 + kept.group_index
    return torch.tensor([int((key == k).nonzero()[0]) for k in kept_key])


def test_selected_token_count_predicts_selection():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert selected_token_count(mask, "sequence", 0.5) == 2 + 1 + 2
    assert selected_token_count(mask, "micro_batch", 0.5) == 4
    with pytest.raises(ValueError, match="batch scope"):
        selected_token_count(mask, "batch", 0.5)


@pytest.fixture(scope="module")
def rollout_batch(policy) -> RolloutBatch:
    model, tokenizer = policy
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Name a colour.", "Count to three."], system_prompt=None,
                         use_chat_template=True)
    eos = list(range(3, len(tokenizer), 5))
    out = TransformersEngine(model, tokenizer, eos).generate(
        ids, 4, SamplingParams(temperature=1.0, max_new_tokens=8), torch.Generator().manual_seed(1)
    )
    n = out.response_ids.shape[0]
    adv = torch.randn(n, generator=torch.Generator().manual_seed(2))[:, None] * out.response_mask
    return RolloutBatch(
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, response_ids=out.response_ids,
        response_mask=out.response_mask, loss_mask=out.response_mask.bool(), old_logprobs=out.logprobs,
        rewards=torch.zeros(n, 1), reward_names=("r",), group_index=out.prompt_index,
        trajectory_index=torch.arange(n), step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool), advantages=adv.float(),
    )


def _update(model, batch, tokens, micro):
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    parts = LossComponents(
        policy_loss=ppo_clip, policy_params=PPOClipParams(), loss_aggregation=token_mean, kl_estimator=None,
        temperature=1.0, max_response_length=8, forward="packed",
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    update = PolicyUpdate(UpdateContext(model, opt, sched), parts, UpdateSchedule(1, 1, micro, None))
    metrics = update.step(batch, Coefficients(), tokens).metrics
    after = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(initial)
    return metrics, after


@pytest.mark.parametrize(("scope", "micro"), [("sequence", 5), ("micro_batch", 4), ("batch", 4)])
def test_token_selection_equals_training_on_the_selected_mask(policy, rollout_batch, scope, micro):
    """Selecting the top |A|·H tokens inside the update = an update whose loss mask is those tokens
    (entropy from the same forward), normalised by their count."""
    from grove.models.logprob_module import response_logprobs

    model = policy[0]
    batch = rollout_batch
    metrics, after = _update(model, batch, TopScoreTokens(scope, 0.5), micro)
    # the expected mask: same micro-batches (groups together, longest first), same entropies
    with torch.no_grad():
        _, entropy = response_logprobs(model, batch, "packed", with_entropy=True)
    order = torch.argsort(batch.response_lengths + batch.prompt_mask.sum(1), descending=True, stable=True)
    order = order[torch.argsort(batch.group_index[order], stable=True)]
    selected = torch.zeros_like(batch.loss_mask)
    for idx in torch.split(order, micro):
        selected[idx] = select_loss_tokens(batch.loss_mask[idx], batch.advantages[idx], entropy[idx], scope, 0.5)
    if scope == "batch":  # one ranking over every token of the (mini-)batch
        selected = select_loss_tokens(batch.loss_mask, batch.advantages, entropy, scope, 0.5)
        assert int(selected.sum()) == math.ceil(0.5 * int(batch.loss_mask.sum()))
    assert metrics["grad_tokens"] == float(selected.sum()) < float(batch.loss_mask.sum())
    assert metrics["selection/kept_tokens_frac"] == pytest.approx(float(selected.sum() / batch.loss_mask.sum()))
    reference, expected = _update(model, batch.replace(loss_mask=selected), EVERY_LOSS_TOKEN, micro)
    assert metrics["loss"] == pytest.approx(reference["loss"], rel=1e-5, abs=1e-7)
    for name in after:
        torch.testing.assert_close(after[name], expected[name], atol=1e-6, rtol=1e-5, msg=name)


def test_token_ratio_one_is_plain_training(policy, rollout_batch):
    relaxed = ScheduledTokenSelection("sequence", KeepRatioSchedule(kind="linear", start=0.5, end=1.0, steps=4), 8)
    assert relaxed.at(1) == TopScoreTokens("sequence", 0.5)
    with_sel, a = _update(policy[0], rollout_batch, relaxed.at(5), 5)  # the ratio has reached 1
    without, b = _update(policy[0], rollout_batch, EVERY_LOSS_TOKEN, 5)
    assert with_sel["loss"] == without["loss"] and "selection/kept_tokens_frac" not in with_sel
    for name in a:
        assert torch.equal(a[name], b[name])


# ------------------------------------------------------------------ through the trainer / CLI
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_dropped_rollouts_never_reach_the_training_forward(tiny_model, tmp_path, monkeypatch):
    seen: list[int] = []
    original = update_module.response_logprobs

    def counting(model, batch, *args, **kwargs):
        if torch.is_grad_enabled():
            seen.append(batch.num_samples)
        return original(model, batch, *args, **kwargs)

    monkeypatch.setattr(update_module, "response_logprobs", counting)
    args = base_overrides(tiny_model, tmp_path / "run", **{
        "train.steps": 1, "train.completions_per_prompt": 4, "eval.before_training": False,
        "selection": "{samples: {ratio: 0.5}}",
    })
    assert run_cli(["train", "examples/arithmetic.yaml", *args]).exit_code == 0
    row = metric_rows(tmp_path / "run")[0]
    assert sum(seen) == 8 == 4 * 4 * 0.5  # 4 groups × 4 rollouts, half kept: 8 rows trained
    assert row["selection/kept_samples_frac"] == 0.5 and row["selection/sample_keep_ratio"] == 0.5


@pytest.mark.parametrize(
    "algorithm",
    [
        "{preset: d3s}",
        "{preset: gspo}",
        "{preset: cispo}",
        "{preset: dapo}",
    ],
)
def test_selection_composes_with_presets_and_losses(tiny_model, tmp_path, algorithm):
    selection = "{samples: {ratio: {kind: linear, start: 0.5, end: 1.0}}, tokens: {ratio: {kind: linear, start: 0.5, end: 1.0}}}"
    extra = {"train.steps": 3, "algorithm": algorithm, "eval.before_training": False, "selection": selection}
    if algorithm == "{preset: d3s}":
        extra.pop("selection")  # the preset's own cosine schedules
    if algorithm == "{preset: cispo}":  # the whole-batch token scope (a no-grad entropy pass first)
        extra["selection"] = selection.replace("end: 1.0}}}", "end: 1.0}, scope: batch}}")
    args = base_overrides(tiny_model, tmp_path / "run", **extra)
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    rows = metric_rows(tmp_path / "run")
    ratios = [r["selection/sample_keep_ratio"] for r in rows]
    if algorithm == "{preset: d3s}":
        assert ratios[0] == 0.5 and ratios[1] == pytest.approx(0.5 + 0.5 * (1 - math.cos(math.pi / 3)) / 2)
    else:
        assert ratios == [0.5, pytest.approx(2 / 3), pytest.approx(5 / 6)]
    first = rows[0]
    assert first["selection/kept_tokens_frac"] < 1.0 and first["grad_tokens"] < first["trained_tokens"]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)


def test_selection_config_errors_name_the_field(tmp_path):
    from pydantic import ValidationError

    with pytest.raises((ValidationError, ValueError), match="selection.samples.ratio"):
        load_config("examples/arithmetic.yaml", ["selection={samples: {ratio: 1.5}}"])
    with pytest.raises((ValidationError, ValueError), match="selection.tokens.scope"):
        load_config("examples/arithmetic.yaml", ["selection={tokens: {scope: batch_wide}}"])
    cfg = load_config("examples/arithmetic.yaml", ["algorithm={preset: d3s}"])
    assert cfg.selection.samples.ratio.start == 0.5 and cfg.selection.tokens.scope == "sequence"
    assert json.loads(cfg.model_dump_json())["selection"]["samples"]["scope"] == "group"

