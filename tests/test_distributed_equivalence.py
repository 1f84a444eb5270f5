"""N ranks equal one: 2-process DDP and FSDP2 runs (gloo, CPU, tiny model; the ranks launched as torchrun launches
them, by ``tests/forked_processes.py``) against the single-process run on the same data, and checkpoints resumed
across world sizes and strategies.

The runs use ``tests/distributed_worker.py``: grove's trainer with a scripted rollout engine whose completions
depend only on the prompt and the index in the group, so every world size sees the same step batch. Compared:
each step's logged loss and gradient norm, the final gradients (after reduction, gathered in full) and the
updated weights, to float32 tolerance (sums over ranks are added in a different order).

Cases: GRPO with token-mean aggregation, Dr.GRPO (constant normaliser), REINFORCE++ (batch whitening, k2 KL
to a reference model that FSDP2 shards too), and GRPO with D^3S at batch scope for samples and tokens
(whole-batch max-variance selection and top-|A|·H ranking over every rank's tokens; ranks then train on
different numbers of samples, so the micro-batch count equalisation is exercised), and GiGPO on FrozenLake
episodes (one sample per turn, step tables and anchor states gathered across ranks), a vision-language policy on
pictures (each sample's pixels gathered and split with it; FSDP2 shards the text decoder's layers), LoRA with a KL term to
the adapter-disabled reference (no-grad passes through the sharded module before the update), two PPO
epochs with recomputed old log-probs (ratio ≠ 1 in the second), and most groups with one reward (their
zero-advantage samples left out of the update, ``train.skip_zero_advantage``, so ranks compute different numbers
of samples).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from forked_processes import run_ranks
from grove.models.tiny import create_tiny_model_dir
from grove.models.tiny_vision import create_tiny_vision_model_dir

# the strategies share one module's reference runs: on one xdist worker they are computed once (make test)
pytestmark = pytest.mark.xdist_group("distributed_equivalence")

ALGORITHMS = {
    "grpo": ["algorithm={advantage: {id: grpo}, policy_loss: {id: ppo_clip}, aggregation: token_mean}"],
    "dr_grpo": ["algorithm={preset: dr_grpo}"],
    "reinforce_pp": ["algorithm={preset: reinforce_pp}"],
    "d3s_batch": [
        "algorithm={advantage: {id: grpo}, aggregation: token_mean}",
        "selection={samples: {scope: batch, ratio: 0.6}, tokens: {scope: batch, ratio: 0.5}}",
    ],
    "lora_kl": [
        "algorithm={advantage: {id: grpo}, aggregation: token_mean, kl: {coef: 0.1, estimator: k3}}",
        "model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj, up_proj]}",
    ],
    "agreeing_groups": [  # most groups with one reward: their samples are left out of the update
        "algorithm={advantage: {id: grpo}, aggregation: token_mean}",
        "rewards=[{id: 'distributed_worker:agreeing_reward'}]",
    ],
    "two_epochs_recompute": [
        "algorithm={advantage: {id: grpo}, aggregation: token_mean}",
        "train.ppo_epochs=2",
        "train.old_logprobs=recompute",
    ],
    "vision_language": [  # a tiny LLaVA-style policy on pictures: every rank's samples carry their pixels
        "model.name=VISION_MODEL",
        "task={id: shapes, train_size: 16, eval_size: 2, image_size: 32}",
        "algorithm={advantage: {id: grpo}, aggregation: token_mean}",
    ],
    "gigpo_frozenlake": [
        "env={id: frozenlake, params: {size: 4, slippery: false, maps: random, num_train_tasks: 16, "
        "num_eval_tasks: 2}, max_turns: 3, prompt: per_step, history: 1, action_parser: {id: first_mention}}",
        "algorithm={advantage: {id: gigpo}, aggregation: token_mean}",
    ],
}


def _base(model: Path, out: Path, steps: int, strategy: str = "ddp") -> list[str]:
    values = {
        "model.name": str(model),
        "output_dir": str(out),
        "threads": 1,
        "task": "{id: arithmetic, train_size: 16, eval_size: 2}",
        "rewards": "[{id: 'distributed_worker:scripted_reward'}]",
        "rollout.max_new_tokens": 6,
        "train.steps": steps,
        "train.prompts_per_step": 4,
        "train.completions_per_prompt": 4,
        "train.micro_batch_size": 4,
        "optim.lr": 1e-2,
        "optim.eps": 1e-3,  # AdamW's update stays smooth in g, so rounding in g cannot flip a near-zero update
        "checkpoint.every": 1,
        "checkpoint.keep_last": 5,
        "logging.progress": False,
        "logging.tensorboard": False,
        "eval.before_training": False,
        "eval.max_examples": 2,
        "distributed.strategy": strategy,
        "distributed.timeout_seconds": 300,
    }
    return [f"{k}={v}" for k, v in values.items()]


def _launch(processes: int, cases: list[dict], spec: Path) -> None:
    spec.write_text(json.dumps(cases))
    run_ranks(processes, "distributed_worker:main", [str(spec)], logs=spec.with_suffix(""), timeout=900)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("distributed")
    model = create_tiny_model_dir(root / "tiny", max_position_embeddings=2048)  # FrozenLake prompts run past 512
    vision = str(create_tiny_vision_model_dir(root / "tiny-vision", family="llava", image_size=32))
    cases = {a: [x.replace("VISION_MODEL", vision) for x in extra] for a, extra in ALGORITHMS.items()}
    one = [{"overrides": _base(model, root / f"one-{a}", 2) + extra} for a, extra in cases.items()]
    one.append({"overrides": _base(model, root / "one-grpo-3", 3) + ALGORITHMS["grpo"]})
    one.append({"overrides": _base(model, root / "from-one", 2) + ALGORITHMS["grpo"]})
    _launch(1, one, root / "one.json")
    for strategy in ("ddp", "fsdp2"):
        world = [
            {"overrides": _base(model, root / f"{strategy}-{a}", 2, strategy) + extra} for a, extra in cases.items()
        ]
        if strategy == "ddp":  # a 1-process checkpoint resumed on 2 ranks
            world.append({"overrides": _base(model, root / "from-one", 3, "ddp") + ALGORITHMS["grpo"], "resume": True})
        else:  # a 2-rank FSDP2 run whose checkpoint is resumed by one process below
            world.append({"overrides": _base(model, root / "from-fsdp2", 2, "fsdp2") + ALGORITHMS["grpo"]})
        _launch(2, world, root / f"{strategy}.json")
    _launch(1, [{"overrides": _base(model, root / "from-fsdp2", 3) + ALGORITHMS["grpo"], "resume": True}],
            root / "resume-one.json")
    return root


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    model = run / "checkpoints" / f"step-{step:06d}" / "model"
    adapter = model / "adapter_model.safetensors"
    return load_file(adapter if adapter.exists() else model / "model.safetensors")


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], what: str, atol: float) -> None:
    assert a.keys() == b.keys(), what
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=atol, rtol=1e-4, msg=lambda m, n=name: f"{what} {n}: {m}")


def _assert_same_run(run: Path, reference: Path, steps: list[int]) -> None:
    got, want = _metrics(run), _metrics(reference)
    for step in steps:
        g = next(m for m in got if m["step"] == step)
        w = next(m for m in want if m["step"] == step)
        for key in ("loss", "grad_norm", "trained_tokens", "reward_mean", "zero_advantage_samples_skipped"):
            if key in w:
                assert g[key] == pytest.approx(w[key], rel=1e-4, abs=1e-6), f"{run.name} step {step} {key}"
    base = _weights(reference, 0 + steps[0] - 1) if steps[0] > 1 else None
    last = steps[-1]
    moved = _weights(run, last)
    _assert_close(moved, _weights(reference, last), f"{run.name} weights", atol=2e-5)
    if base is not None:  # the compared steps really changed the weights
        assert any((moved[k] - base[k]).abs().max() > 1e-3 for k in moved)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
@pytest.mark.parametrize("algorithm", list(ALGORITHMS))
def test_two_ranks_equal_one_process(runs, strategy, algorithm):
    run, reference = runs / f"{strategy}-{algorithm}", runs / f"one-{algorithm}"
    _assert_same_run(run, reference, [1, 2])
    if algorithm == "agreeing_groups":  # the skip happened
        assert all(m["zero_advantage_samples_skipped"] > 0 for m in _metrics(reference))
    final = _weights(run, 2)
    if algorithm.startswith("lora"):  # adapters only; B starts at zero
        assert any(final[k].abs().max() > 1e-3 for k in final if "lora_B" in k), "the adapters did not train"
    else:
        # the tiny vision-language directory names its weights in transformers' older layout: compare with step 1
        initial = _weights(run, 1) if algorithm == "vision_language" else load_file(runs / "tiny" / "model.safetensors")
        assert any((final[k] - initial[k]).abs().max() > 1e-3 for k in initial), "the update did not move the weights"
    _assert_close(
        torch.load(run / "final_grads.pt"), torch.load(reference / "final_grads.pt"), f"{run.name} gradients", 1e-6
    )


def test_one_process_checkpoint_resumes_on_two_ddp_ranks(runs):
    _assert_same_run(runs / "from-one", runs / "one-grpo-3", [3])


def test_two_rank_fsdp2_checkpoint_resumes_in_one_process(runs):
    _assert_same_run(runs / "from-fsdp2", runs / "one-grpo-3", [3])
    metrics = _metrics(runs / "from-fsdp2")
    assert [m["step"] for m in metrics] == [1, 2, 3]  # the resumed log continues, no step lost or repeated


def test_checkpoints_are_plain_transformers_models(runs):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(runs / "fsdp2-grpo" / "checkpoints" / "step-000002" / "model")
    assert sum(p.numel() for p in model.parameters()) > 0
