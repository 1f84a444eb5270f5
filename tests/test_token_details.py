"""``logging.token_details``: per-token records of training samples in ``RUN_DIR/token_details.jsonl``.

The records hold the trained batch's own values (token ids, old log-probs, advantages, loss mask) for whole prompt
groups, the entropy of the pre-update policy (equal to one computed from the model's logits), and the loss mask the
update really trained on after D^3S token selection, for every token scope; the trainer writes them on step 1 and
every ``every``-th step, nothing when off, without changing the run; a resumed run drops the records after its
checkpoint; an agent conversation's environment tokens are recorded with loss mask 0."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from tests.tiny_runs import TESTS, copy_run, records, run_config
from transformers import AutoTokenizer

from grove.batch import RolloutBatch
from grove.config import ConfigError
from grove.core.selection import keep_count, select_tokens, token_scores
from grove.pipeline import update as update_module
from grove.pipeline.token_details import (
    TokenDetailsRecorder,
    chosen_rows,
    records_on_step,
    round_significant,
    token_entropy,
)
from grove.pipeline.token_selection import TopScoreTokens
from grove.pipeline.update import Coefficients, LossComponents, PolicyUpdate, UpdateSchedule
from grove.pipeline.update_seam import UpdateContext
from grove.registry import LOSS_AGGREGATIONS, POLICY_LOSSES
from grove.resolve import load_config
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine
from grove.training.trainer import Trainer

sys.path.insert(0, str(TESTS))  # the tiny runs' user reward (tests/user_rewards.py)

# ---------------------------------------------------------------------------------------------- the pieces


def test_steps_recorded_are_step_1_and_every_multiple():
    assert [s for s in range(1, 13) if records_on_step(s, 4)] == [1, 4, 8, 12]
    assert [s for s in range(1, 4) if records_on_step(s, 1)] == [1, 2, 3]
    assert not any(records_on_step(s, 0) for s in range(0, 20))
    assert not records_on_step(0, 4)


def test_whole_groups_are_chosen_in_batch_order():
    groups = torch.tensor([5, 5, 5, 2, 2, 2, 9, 9])
    assert chosen_rows(groups, 8).tolist() == list(range(8))
    assert chosen_rows(groups, 7).tolist() == [0, 1, 2, 3, 4, 5]  # the third group does not fit whole
    assert chosen_rows(groups, 5).tolist() == [0, 1, 2]
    assert chosen_rows(groups, 2).tolist() == [0, 1]  # the first group alone is larger: its first rows
    interleaved = torch.tensor([1, 0, 1, 0, 3])
    assert chosen_rows(interleaved, 4).tolist() == [0, 2, 1, 3]  # a group's rows side by side
    assert chosen_rows(interleaved, 3).tolist() == [0, 2]
    with pytest.raises(ValueError, match="max_samples"):
        chosen_rows(groups, 0)


def test_floats_are_rounded_to_four_significant_digits():
    values = torch.tensor([0.123456, -6.09351, 12345.6, 0.0, 1.0, 9.99996, 1.23456e-7, float("nan")])
    rounded = round_significant(values).tolist()
    assert rounded[:7] == [0.1235, -6.094, 12350.0, 0.0, 1.0, 10.0, pytest.approx(1.235e-7, rel=1e-12)]
    assert math.isnan(rounded[7])
    assert json.dumps(rounded[:3]) == "[0.1235, -6.094, 12350.0]"  # short decimals in the file


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("logging.token_details.every", "-1", "logging.token_details.every: Input should be greater than or equal to 0"),
        ("logging.token_details.max_samples", "0", "logging.token_details.max_samples: Input should be greater"),
        ("logging.token_details", "{every: 2, samples: 4}", "logging.token_details.samples: unknown key"),
    ],
)
def test_bad_settings_name_the_field(key, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"{key}={value}"])


def test_token_details_are_on_by_default_at_a_modest_size():
    settings = load_config(None, []).logging.token_details
    assert settings.every == 10 and settings.max_samples == 16


# ---------------------------------------------------------------------------------------------- records of a batch


@pytest.fixture(scope="module")
def batch(policy) -> RolloutBatch:
    """Three prompts × 3 completions of the tiny model with random per-token advantages; the first group's
    advantages are all zero (one reward for all); some tokens are out of the loss (as an agent's environment
    tokens); a reward that does not apply to one sample (NaN); anchors."""
    model, tokenizer = policy
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Name a colour, please.", "Count to 3."], system_prompt=None,
                         use_chat_template=True)
    out = TransformersEngine(model, tokenizer).generate(
        ids, 3, SamplingParams(temperature=1.0, max_new_tokens=8), torch.Generator().manual_seed(3)
    )
    n = out.response_ids.shape[0]
    adv = torch.randn(n, 8, generator=torch.Generator().manual_seed(4)) * out.response_mask
    adv[:3] = 0.0
    loss_mask = out.response_mask.bool().clone()
    loss_mask[4, 1:3] = False
    rewards = torch.arange(2 * n, dtype=torch.float32).reshape(n, 2) / 3
    rewards[5, 1] = float("nan")
    return RolloutBatch(
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, response_ids=out.response_ids,
        response_mask=out.response_mask, loss_mask=loss_mask, old_logprobs=out.logprobs,
        rewards=rewards, reward_names=("accuracy", "format"), group_index=out.prompt_index,
        trajectory_index=torch.arange(n) + 100, step_index=torch.arange(n) % 2,
        truncated=torch.zeros(n, dtype=torch.bool),
        advantages=adv.float(),
    )


def _parts(skip: bool = False, temperature: float = 1.0) -> LossComponents:
    return LossComponents(
        policy_loss=POLICY_LOSSES.get("ppo_clip"), policy_params=POLICY_LOSSES.validate_params("ppo_clip", {}),
        loss_aggregation=LOSS_AGGREGATIONS.get("token_mean"), kl_estimator=None, temperature=temperature,
        max_response_length=8, forward="packed", skip_zero_advantage=skip,
    )


def logits_entropy(model, batch: RolloutBatch, temperature: float) -> torch.Tensor:
    """``[N, R]``: the entropy of the next-token distribution at each response token, from the model's full logits
    (independent of grove's chunked output projection), 0 at padding."""
    input_ids = torch.cat([batch.prompt_ids, batch.response_ids], 1)
    attention = torch.cat([batch.prompt_mask, batch.response_mask], 1).long()
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits.float()
    p, r = batch.prompt_ids.shape[1], batch.response_ids.shape[1]
    logp = torch.log_softmax(logits[:, p - 1 : p + r - 1] / temperature, -1)
    return -(logp.exp() * logp).sum(-1) * batch.response_mask


def _capture(model, tokenizer, batch, parts, max_samples=16):
    written: list[list[dict]] = []
    details = TokenDetailsRecorder(1, max_samples, parts, tokenizer, written.append).capture(1, model, batch)
    return details, written


def _width(record: dict) -> int:
    return len(record["token_ids"])


def test_the_entropy_pass_compiles_nothing_where_the_layers_are_compiled(policy, batch):
    """With ``train.compile`` the diagnostic no-grad pass runs the compiled layers eagerly: a no-grad graph would cost
    one more compilation for one pass per recorded step."""
    import copy

    from torch._dynamo.utils import counters

    from grove.models.compiled_layers import CompileUnavailable, compile_decoder_layers

    model = copy.deepcopy(policy[0])
    eager = token_entropy(model, batch, _parts())
    try:
        compile_decoder_layers(model)
    except CompileUnavailable as exc:
        pytest.skip(str(exc))
    graphs = counters["stats"]["unique_graphs"]
    torch.testing.assert_close(token_entropy(model, batch, _parts()), eager)
    assert counters["stats"]["unique_graphs"] == graphs


def test_records_hold_the_batch_values_and_the_entropy_of_the_logits(policy, batch):
    model, tokenizer = policy
    details, written = _capture(model, tokenizer, batch, _parts(temperature=0.7), max_samples=7)
    metrics = details.write(None)  # every loss token trained on
    assert metrics["token_details_seconds"] > 0
    (records_,) = written
    assert [r["row"] for r in records_] == [0, 1, 2, 3, 4, 5]  # two whole groups of 3 (7 rows would split the third)
    entropy = logits_entropy(model, batch, 0.7)
    assert bool((entropy[:6][batch.response_mask[:6].bool()] > 0.01).all())  # a real distribution, not zeros
    lengths = batch.response_mask.sum(1)
    for rec in records_:
        i, n = rec["row"], _width(rec)
        assert n == int(lengths[i]) and n > 0
        assert rec["step"] == 1 and rec["group"] == int(batch.group_index[i])
        assert rec["trajectory"] == 100 + i and rec["turn"] == i % 2 and rec["anchor"] is None
        assert rec["token_ids"] == batch.response_ids[i, :n].tolist()
        assert rec["tokens"] == [tokenizer.decode([t]) for t in rec["token_ids"]]
        assert rec["prompt"] == tokenizer.decode(batch.prompt_ids[i][batch.prompt_mask[i].bool()])
        assert "<|im_start|>" in rec["prompt"] and tokenizer.pad_token not in rec["prompt"].replace("<|im_end|>", "")
        assert rec["loss_mask"] == batch.loss_mask[i, :n].int().tolist()
        assert all(len(rec[k]) == n for k in ("tokens", "logprob", "entropy", "advantage", "loss_mask"))
        assert rec["logprob"] == pytest.approx(batch.old_logprobs[i, :n].tolist(), rel=1e-3, abs=1e-9)
        assert rec["advantage"] == pytest.approx(batch.advantages[i, :n].tolist(), rel=1e-3, abs=1e-9)
        assert rec["entropy"] == pytest.approx(entropy[i, :n].tolist(), rel=1e-3, abs=1e-5)
        assert rec["kept"] is None
        mask = batch.loss_mask[i, :n].float()
        seq = float((batch.advantages[i, :n] * mask).sum() / mask.sum().clamp_min(1))
        assert rec["sequence_advantage"] == pytest.approx(seq, rel=1e-3, abs=1e-9)
        accuracy, format_ = batch.rewards[i].tolist()
        assert rec["rewards"]["accuracy"] == pytest.approx(accuracy, rel=1e-3, abs=1e-9)
        if i == 5:
            assert rec["rewards"]["format"] is None  # NaN: the objective does not apply to the sample
        else:
            assert rec["rewards"]["format"] == pytest.approx(format_, rel=1e-3, abs=1e-9)
    assert records_[4]["loss_mask"][1:3] == [0, 0]
    assert json.loads(json.dumps(records_)) == records_  # JSON-ready: no NaN, no tensors


def _observed_update_masks(monkeypatch) -> dict[int, torch.Tensor]:
    """Every micro-batch's loss mask after token selection as the update's loss computed it, by trajectory."""
    seen: dict[int, torch.Tensor] = {}
    original = update_module.micro_batch_loss

    def observing(model, mb, *args, **kwargs):
        out = original(model, mb, *args, **kwargs)
        for trajectory, row in zip(mb.trajectory_index.tolist(), out[3].detach().cpu(), strict=True):
            seen.setdefault(trajectory, row)  # the first epoch's
        return out

    monkeypatch.setattr(update_module, "micro_batch_loss", observing)
    return seen


def _update(model, batch, parts, scope, ratio=0.5, micro=4, epochs=1):
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    update = PolicyUpdate(UpdateContext(model, opt, sched), parts, UpdateSchedule(epochs, 1, micro, 1.0))
    try:
        return update.step(batch, Coefficients(), TopScoreTokens(scope, ratio))
    finally:
        model.load_state_dict(initial)


@pytest.mark.parametrize("scope", ["sequence", "micro_batch", "batch"])
def test_kept_is_the_mask_the_update_trained_on(policy, batch, monkeypatch, scope):
    """Across a micro-batch or the whole mini-batch the kept tokens depend on the other rows ranked with them:
    ``kept`` is what the update's loss used, for the recorded rows only, whatever their place in the micro-batches
    (two epochs: the first epoch's mask). Within a completion it is also ``select_tokens`` on |A|·H."""
    model, tokenizer = policy
    parts = _parts()
    details, written = _capture(model, tokenizer, batch, parts, max_samples=6)
    seen = _observed_update_masks(monkeypatch)
    outcome = _update(model, batch, parts, scope, micro=4, epochs=2)
    details.write(outcome.trained_mask)
    (records_,) = written
    assert outcome.trained_mask is not None and sorted(seen) == list(range(100, 109))
    for rec in records_:
        observed = seen[100 + rec["row"]]
        assert rec["kept"] == observed[: _width(rec)].int().tolist()
        assert all(k <= m for k, m in zip(rec["kept"], rec["loss_mask"], strict=True))
    assert sum(map(sum, (r["kept"] for r in records_))) < sum(map(sum, (r["loss_mask"] for r in records_)))
    if scope == "sequence":
        rows = details.rows
        expected = select_tokens(token_scores(batch.advantages[rows], details.entropy), batch.loss_mask[rows].float(),
                                 0.5, scope="sequence")
        assert torch.equal(outcome.trained_mask[rows], expected)


def test_kept_of_samples_left_out_for_lack_of_signal(policy, batch, monkeypatch):
    """``train.skip_zero_advantage`` leaves the first group (all advantages zero) out of the forward; its kept tokens
    are those its selection counts in the loss: every score is zero, so each row's first ⌈ratio·n⌉ tokens."""
    model, tokenizer = policy
    parts = _parts(skip=True)
    details, written = _capture(model, tokenizer, batch, parts, max_samples=6)
    seen = _observed_update_masks(monkeypatch)
    outcome = _update(model, batch, parts, "sequence")
    details.write(outcome.trained_mask)
    metrics = outcome.metrics
    assert metrics["zero_advantage_samples_skipped"] == 3 and not {100, 101, 102} & set(seen)
    for rec in written[0]:
        if rec["row"] < 3:
            k = int(keep_count(torch.tensor(sum(rec["loss_mask"])), 0.5, minimum=1))
            assert rec["kept"] == [1] * k + [0] * (_width(rec) - k)
        else:
            assert rec["kept"] == seen[100 + rec["row"]][: _width(rec)].int().tolist()


def test_kept_is_null_when_no_update_reports_a_mask(policy, batch):
    """A step whose update did not run (a non-finite advantage skips it) has no trained mask: ``kept`` is null."""
    model, tokenizer = policy
    details, written = _capture(model, tokenizer, batch, _parts())
    details.write(None)
    assert all(r["kept"] is None for r in written[0])


# ---------------------------------------------------------------------------------------------- the trainer


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", initializer_range=0.2)


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _updated_batches(monkeypatch) -> dict[int, RolloutBatch]:
    """The batch each step's update trained on, by step (the trainer's calls of the policy update observed)."""
    batches: dict[int, RolloutBatch] = {}
    original = PolicyUpdate.step

    def observing(self, batch, *args, **kwargs):
        batches[len(batches) + 1] = batch
        return original(self, batch, *args, **kwargs)

    monkeypatch.setattr(PolicyUpdate, "step", observing)
    return batches


def test_the_trainer_records_steps_1_and_every_multiple_from_the_trained_batch(tiny_model, tmp_path, monkeypatch):
    out = tmp_path / "run"
    batches = _updated_batches(monkeypatch)
    extra = {"logging.token_details": "{every: 2, max_samples: 4}", "train.prompts_per_step": 3,
             "selection.tokens": "{ratio: 0.5, scope: batch}", "train.skip_zero_advantage": False}
    Trainer(run_config(tiny_model, out, 5, **extra), out).run()
    written = _read(out / "token_details.jsonl")
    assert sorted({r["step"] for r in written}) == [1, 2, 4]
    metrics = _read(out / "metrics.jsonl")
    assert [m["step"] for m in metrics if "token_details_seconds" in m] == [1, 2, 4]
    for step in (1, 2, 4):
        step_records = [r for r in written if r["step"] == step]
        batch = batches[step]
        assert [r["row"] for r in step_records] == [0, 1, 2]  # one whole group of 3 (two would be 6 > 4)
        for rec in step_records:
            i, n = rec["row"], _width(rec)
            assert n == int(batch.response_mask[i].sum())
            assert rec["token_ids"] == batch.response_ids[i, :n].tolist()
            assert rec["loss_mask"] == batch.loss_mask[i, :n].int().tolist()
            assert rec["logprob"] == pytest.approx(batch.old_logprobs[i, :n].tolist(), rel=1e-3, abs=1e-9)
            assert rec["advantage"] == pytest.approx(batch.advantages[i, :n].tolist(), rel=1e-3, abs=1e-9)
            assert rec["group"] == int(batch.group_index[i]) and rec["turn"] == 0 and rec["anchor"] is None
            assert rec["kept"] is not None and sum(rec["kept"]) <= sum(rec["loss_mask"])
            assert len(rec["entropy"]) == n and rec["rewards"].keys() == {"char_count"}


def test_sample_row_names_the_collected_sample_under_sample_selection(tiny_model, tmp_path):
    """With D^3S sample selection the trained batch's rows are a subset of the collected ones: ``sample_row`` is
    the collected row, so the record's prompt and tokens are those of samples.jsonl's completion at that position."""
    out = tmp_path / "selected"
    extra = {"logging.token_details": "{every: 1, max_samples: 16}", "train.prompts_per_step": 3,
             "logging.samples_per_step": 100, "train.skip_zero_advantage": False,
             "selection.samples": "{ratio: 0.5, scope: group, min_per_group: 2}"}
    Trainer(run_config(tiny_model, out, 2, **extra), out).run()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    written = _read(out / "token_details.jsonl")
    samples = _read(out / "samples.jsonl")
    assert written
    moved = 0
    for rec in written:
        collected = [s for s in samples if s["step"] == rec["step"]]
        sample = collected[rec["sample_row"]]
        assert sample["prompt"] in rec["prompt"]
        assert tokenizer.decode(rec["token_ids"], skip_special_tokens=True).strip() == sample["completion"].strip()
        moved += rec["sample_row"] != rec["row"]
    assert moved, "selection kept the first rows only: the test shows nothing"


def test_off_writes_nothing_and_recording_leaves_training_unchanged(tiny_model, tmp_path):
    runs = {}
    for every in (0, 1):
        out = tmp_path / f"every{every}"
        Trainer(run_config(tiny_model, out, 2, **{"logging.token_details.every": every}), out).run()
        runs[every] = out
    assert not (runs[0] / "token_details.jsonl").exists()
    assert not any("token_details_seconds" in m for m in _read(runs[0] / "metrics.jsonl"))
    assert sorted({r["step"] for r in _read(runs[1] / "token_details.jsonl")}) == [1, 2]
    assert records(runs[0] / "metrics.jsonl") == records(runs[1] / "metrics.jsonl")  # timing fields aside
    assert records(runs[0] / "samples.jsonl") == records(runs[1] / "samples.jsonl")


def test_a_resumed_run_drops_the_records_after_its_checkpoint(tiny_model, tmp_path):
    full = tmp_path / "full"
    Trainer(run_config(tiny_model, full, 3, **{"logging.token_details.every": 1}), full).run()
    uninterrupted = _read(full / "token_details.jsonl")
    assert sorted({r["step"] for r in uninterrupted}) == [1, 2, 3]
    killed = copy_run(full, tmp_path / "killed", last_step=1)
    (killed / "token_details.jsonl").write_text((full / "token_details.jsonl").read_text())  # step 2's and 3's too
    cfg = run_config(tiny_model, killed, 3, **{"logging.token_details.every": 1})
    trainer = Trainer(cfg, killed, resume=True)
    assert {r["step"] for r in _read(killed / "token_details.jsonl")} == {1}
    trainer.run()
    assert _read(killed / "token_details.jsonl") == uninterrupted


def test_an_agent_conversation_records_environment_tokens_out_of_the_loss(tiny_model, tmp_path):
    from tests.test_experience_environments import ENV_BASE

    out = tmp_path / "agent"
    settings = {**ENV_BASE, "model.name": tiny_model, "output_dir": out, "env.prompt": "conversation",
                "train.steps": 1, "eval.before_training": False, "logging.token_details.every": 1}
    cfg = load_config(None, [f"{k}={v}" for k, v in settings.items()])
    Trainer(cfg, out).run()
    written = _read(out / "token_details.jsonl")
    assert written and all(r["step"] == 1 for r in written)
    observed = [r for r in written if 0 in r["loss_mask"]]
    assert observed, "no recorded conversation holds an environment turn"
    for rec in observed:
        environment = [i for i, m in enumerate(rec["loss_mask"]) if m == 0]
        assert all(rec["logprob"][i] == 0 and rec["entropy"][i] == 0 and rec["advantage"][i] == 0 for i in environment)
        text = "".join(rec["tokens"][i] for i in environment)
        assert "P" in text and "_" in text  # the corridor's observation
        assert any(rec["entropy"][i] > 0 for i, m in enumerate(rec["loss_mask"]) if m)
    assert len({r["group"] for r in written}) >= 1 and all(r["anchor"] is None or isinstance(r["anchor"], int)
                                                             for r in written)
    ids = {s["trajectory_id"] for s in _read(out / "samples.jsonl")}
    assert {r["trajectory"] for r in written} <= ids  # each record joins its trajectory in samples.jsonl


def test_the_run_logger_writes_token_details_and_reports_a_failed_write(tmp_path):
    from grove.infra.run_logs import NullRunLogger, RunLogger
    from grove.infra.write_failures import RunWriteError

    logger = RunLogger(tmp_path, tensorboard=False)
    logger.log_token_details([{"step": 1, "row": 0}, {"step": 2, "row": 0}])
    logger.log_token_details([])
    assert _read(tmp_path / "token_details.jsonl") == [{"step": 1, "row": 0}, {"step": 2, "row": 0}]
    RunLogger(tmp_path, tensorboard=False, resume_step=1)  # resuming from step 1's checkpoint
    assert _read(tmp_path / "token_details.jsonl") == [{"step": 1, "row": 0}]
    NullRunLogger().log_token_details([{"step": 1}])  # the other ranks write nothing

    broken = tmp_path / "broken"
    (broken / "token_details.jsonl").mkdir(parents=True)  # a write there fails
    with pytest.raises(RunWriteError, match=r"could not write the log .*token_details\.jsonl.*--resume"):
        RunLogger(broken, tensorboard=False).log_token_details([{"step": 1}])


def test_an_agent_sample_holding_one_step_records_that_steps_anchor():
    from types import SimpleNamespace

    from grove.batch import StepTable
    from grove.pipeline.token_details import _single_step_anchors

    # rows 0 and 1 hold one step each (per-step prompts); row 2 holds two (a conversation); row 3 none
    sample = torch.tensor([0, 1, 2, 2])
    zeros = torch.zeros(4, dtype=torch.long)
    steps = StepTable(sample=sample, group=zeros, trajectory=torch.tensor([0, 1, 2, 2]),
                      index=torch.tensor([0, 0, 0, 1]), anchor=torch.tensor([5, 7, 5, 8]),
                      reward=zeros.float(), penalty=zeros.float(), terminal=torch.tensor([True, True, False, True]))
    assert _single_step_anchors(SimpleNamespace(steps=steps, num_samples=4)) == [5, 7, None, None]
    assert _single_step_anchors(SimpleNamespace(steps=None, num_samples=2)) == [None, None]


def test_each_agent_turn_records_the_parts_of_its_gigpo_advantage(tiny_model, tmp_path):
    from tests.test_experience_environments import ENV_BASE

    for prompt in ("per_step", "conversation"):
        out = tmp_path / prompt
        settings = {**ENV_BASE, "model.name": tiny_model, "output_dir": out, "env.prompt": prompt, "train.steps": 1,
                    "eval.before_training": False, "logging.token_details.every": 1, "algorithm.advantage.id": "gigpo",
                    "algorithm.advantage.step_advantage_weight": 0.5}
        Trainer(load_config(None, [f"{k}={v}" for k, v in settings.items()]), out).run()
        written = _read(out / "token_details.jsonl")
        assert written
        for rec in written:
            parts = rec["step_advantages"]
            assert parts and [p["turn"] for p in parts] == sorted(p["turn"] for p in parts)
            assert all(set(p) == {"turn", "episode", "step"} for p in parts)
            trained = [a for a, m in zip(rec["advantage"], rec["loss_mask"], strict=True) if m]
            if prompt == "per_step":  # one step per sample: its tokens carry A^E + ω·A^S
                (part,) = parts
                assert part["turn"] == rec["turn"]
                assert all(a == pytest.approx(part["episode"] + part["step"], rel=2e-3, abs=2e-4) for a in trained)
            else:  # the conversation's tokens carry each of its turns' sums
                sums = [p["episode"] + p["step"] for p in parts]
                assert all(any(a == pytest.approx(s, rel=2e-3, abs=2e-4) for s in sums) for a in trained)


def test_the_step_advantage_parts_follow_each_samples_steps_in_turn_order():
    from types import SimpleNamespace

    from grove.batch import StepTable
    from grove.pipeline.token_details import _step_advantage_parts

    zeros = torch.zeros(4, dtype=torch.long)
    steps = StepTable(sample=torch.tensor([1, 0, 1, 1]), group=zeros, trajectory=torch.tensor([1, 0, 1, 1]),
                      index=torch.tensor([2, 0, 0, 1]), anchor=zeros, reward=zeros.float(), penalty=zeros.float(),
                      terminal=torch.tensor([True, True, False, False]),
                      columns={"advantage_episode": torch.tensor([1.0, 2.0, 1.0, 1.0]),
                               "advantage_step": torch.tensor([0.5, float("nan"), -0.25, 0.125])})
    parts = _step_advantage_parts(SimpleNamespace(steps=steps, num_samples=3))
    assert parts[0] == [{"turn": 0, "episode": 2.0, "step": None}]
    assert parts[1] == [{"turn": 0, "episode": 1.0, "step": -0.25}, {"turn": 1, "episode": 1.0, "step": 0.125},
                        {"turn": 2, "episode": 1.0, "step": 0.5}]
    assert parts[2] == []
    assert _step_advantage_parts(SimpleNamespace(steps=None, num_samples=2)) == [None, None]
