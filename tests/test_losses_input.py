"""The typed policy-loss input: validated shapes, every field filled by the update stage, a loss that needs the
reference log-probs gets a reference model, and algorithm.sequence_count reaches the aggregation."""

from __future__ import annotations

import pytest
import torch

from grove.batch import RolloutBatch
from grove.core.aggregation import seq_mean_token_mean
from grove.core.losses import PolicyLossInput, PolicyLossOutput
from grove.core.losses.ppo_clip import PPOClipParams, ppo_clip
from grove.pipeline.micro_batches import largest_first
from grove.pipeline.update import Coefficients, LossComponents, PolicyUpdate, UpdateSchedule
from grove.pipeline.update_seam import UpdateContext
from grove.registry import POLICY_LOSSES, NoParams, Requires
from grove.resolve import load_config, resolve
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine

SEEN: list[PolicyLossInput] = []


@POLICY_LOSSES.register(
    "test_recording_loss", requires=(Requires.REFERENCE_LOGPROBS,), summary="ppo_clip that records its input"
)
def recording_loss(inputs: PolicyLossInput, params: NoParams) -> PolicyLossOutput:
    SEEN.append(inputs)
    return ppo_clip(inputs, PPOClipParams())


def test_shapes_are_checked_and_named():
    x = torch.zeros(2, 3)
    PolicyLossInput(x, x, x, x, group_index=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"advantages must be \[N, R\] = \(2, 3\), got \(2, 4\)"):
        PolicyLossInput(x, x, torch.zeros(2, 4), x)
    with pytest.raises(ValueError, match=r"group_index must be \[N\] = \(2,\), got \(3,\)"):
        PolicyLossInput(x, x, x, x, group_index=torch.zeros(3))
    with pytest.raises(ValueError, match=r"logprobs must be \[N, R\]"):
        PolicyLossInput(torch.zeros(2), x, x, x)


@pytest.fixture(scope="module")
def batch(policy) -> RolloutBatch:
    model, tokenizer = policy
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Name a colour."], system_prompt=None, use_chat_template=True)
    out = TransformersEngine(model, tokenizer).generate(
        ids, 3, SamplingParams(temperature=1.0, max_new_tokens=6), torch.Generator().manual_seed(3)
    )
    n = out.response_ids.shape[0]
    adv = torch.randn(n, generator=torch.Generator().manual_seed(4))[:, None] * out.response_mask
    loss_mask = out.response_mask.bool().clone()
    loss_mask[1] = False  # a fully masked row (as DAPO's overlong filtering leaves)
    return RolloutBatch(
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, response_ids=out.response_ids,
        response_mask=out.response_mask, loss_mask=loss_mask, old_logprobs=out.logprobs,
        rewards=torch.zeros(n, 1), reward_names=("r",), group_index=out.prompt_index + 10,
        trajectory_index=torch.arange(n) + 100, step_index=torch.arange(n) % 2, truncated=torch.zeros(n, dtype=torch.bool),
        advantages=adv.float(), ref_logprobs=out.logprobs - 0.1,
    )


def _update(model, batch, policy_loss, sequence_count="all_rows", micro=6):
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    parts = LossComponents(
        policy_loss=policy_loss, policy_params=NoParams() if policy_loss is recording_loss else PPOClipParams(),
        loss_aggregation=seq_mean_token_mean, kl_estimator=None, temperature=1.0, max_response_length=6,
        forward="packed", sequence_count=sequence_count,
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    metrics = PolicyUpdate(UpdateContext(model, opt, sched), parts, UpdateSchedule(1, 1, micro, None)).step(
        batch, Coefficients()
    ).metrics
    model.load_state_dict(initial)
    return metrics


def test_update_fills_every_field_for_the_loss(policy, batch):
    model, _ = policy
    SEEN.clear()
    _update(model, batch, recording_loss, micro=3)
    assert len(SEEN) == 2  # two micro-batches
    rows = torch.cat([s.trajectory_index for s in SEEN]) - 100  # which batch rows each micro-batch held
    assert sorted(rows.tolist()) == list(range(6))
    for inputs in SEEN:
        idx = inputs.trajectory_index - 100
        width = inputs.logprobs.shape[1]
        assert inputs.entropy is not None and inputs.entropy.requires_grad and inputs.entropy.shape == inputs.logprobs.shape
        assert inputs.logprobs.requires_grad
        torch.testing.assert_close(inputs.old_logprobs, inputs.logprobs.detach())  # on-policy: ratio exactly 1
        torch.testing.assert_close(inputs.ref_logprobs, batch.ref_logprobs[idx, :width])
        torch.testing.assert_close(inputs.rollout_logprobs, batch.old_logprobs[idx, :width])
        torch.testing.assert_close(inputs.advantages, batch.advantages[idx, :width])
        assert torch.equal(inputs.mask, batch.loss_mask[idx, :width])
        assert torch.equal(inputs.group_index, batch.group_index[idx])
        assert torch.equal(inputs.step_index, batch.step_index[idx])


def test_micro_batches_run_largest_first(policy, batch):
    """The update feeds its micro-batches in decreasing token count (the allocator's high-water mark is then
    set once, by the first), whatever order the grouping produced."""
    model, _ = policy
    SEEN.clear()
    _update(model, batch, recording_loss, micro=1)
    assert len(SEEN) == 6
    tokens = batch.response_lengths + batch.prompt_mask.sum(1)
    seen = [int(tokens[s.trajectory_index - 100].sum()) for s in SEEN]
    assert seen == sorted(seen, reverse=True)
    # the helper alone: sizes from the token counts, ties in their original order
    parts = [torch.tensor([0]), torch.tensor([1, 2]), torch.tensor([3]), torch.tensor([4])]
    ordered = largest_first(parts, torch.tensor([5, 1, 1, 9, 5]))
    assert [p.tolist() for p in ordered] == [[3], [0], [4], [1, 2]]


def test_a_loss_that_reads_ref_logprobs_loads_a_reference_model():
    cfg = load_config(None, ["algorithm.policy_loss={id: test_recording_loss}"])
    assert cfg.algorithm.kl.coef == 0 and resolve(cfg, preflight_checks=False).model_needs.reference
    assert not resolve(load_config(None, []), preflight_checks=False).model_needs.reference
    assert resolve(load_config(None, ["algorithm.kl.coef=0.1"]), preflight_checks=False).model_needs.reference


def test_sequence_count_reaches_the_update(policy, batch):
    cfg = load_config(None, ["algorithm.sequence_count=rows_with_loss_tokens"])
    assert resolve(cfg, preflight_checks=False).components.loss.sequence_count == "rows_with_loss_tokens"
    assert resolve(load_config(None, []), preflight_checks=False).components.loss.sequence_count == "all_rows"
    model, _ = policy
    all_rows = _update(model, batch, ppo_clip)["loss"]
    with_tokens = _update(model, batch, ppo_clip, sequence_count="rows_with_loss_tokens")["loss"]
    # 6 rows, one without loss tokens: the seq-mean divides by 6 or by 5
    assert all_rows != 0
    assert with_tokens == pytest.approx(all_rows * 6 / 5, rel=1e-6)


def test_trainer_gives_a_ref_logprobs_loss_the_reference_policy(tmp_path):
    """Through the CLI with kl.coef 0: the loss's requires=(Requires.REFERENCE_LOGPROBS,) alone loads the reference model."""
    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    SEEN.clear()
    args = base_overrides(model, tmp_path / "run", **{"train.steps": 1, "algorithm.kl.coef": 0.0,
                                                      "algorithm.policy_loss": "{id: test_recording_loss}"})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    assert SEEN and all(s.ref_logprobs is not None for s in SEEN)
    # the reference is the initial policy: on the first (on-policy) step it equals the current log-probs
    for s in SEEN:
        torch.testing.assert_close(s.ref_logprobs * s.mask, s.logprobs.detach() * s.mask, atol=1e-5, rtol=0)
