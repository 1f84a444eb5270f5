"""LoRA through the trainer: adapters train, the reference policy is the base model (adapters disabled, no
second copy), checkpoints hold the adapter, a LoRA run resumes, and `grove export` merges it into a model whose
outputs equal the trained policy's."""

from __future__ import annotations

from pathlib import Path

import torch
from typer.testing import CliRunner

from grove.cli import app
from grove.models.logprob_module import response_logprobs
from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config
from grove.training.trainer import Trainer


def _overrides(model: Path, out: Path, steps: int) -> list[str]:
    return [
        f"model.name={model}", f"output_dir={out}", "threads=1", "task={id: arithmetic, train_size: 8, eval_size: 2}",
        "rollout.max_new_tokens=6", f"train.steps={steps}", "train.prompts_per_step=2",
        "train.completions_per_prompt=4", "train.micro_batch_size=4", "optim.lr=5e-2", "checkpoint.every=1",
        "logging.progress=false", "logging.plots=false", "logging.tensorboard=false", "eval.before_training=false", "eval.max_examples=2",
        "rewards=[{id: 'user_rewards:char_count'}]",
        "model.lora={r: 4, alpha: 8, target_modules: [q_proj, v_proj, up_proj]}",
        "algorithm={advantage: {id: grpo}, kl: {coef: 0.1, estimator: k3}}",
    ]


def test_lora_trains_with_the_base_model_as_reference_and_exports(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    model_dir = create_tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "run"
    trainer = Trainer(load_config(None, _overrides(model_dir, out, 2)), out)
    assert trainer.models.lora and trainer.models.reference is trainer.model  # no second model copy
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    trainer.run()

    batch = trainer.source.collect(3).batch
    base, _ = load_policy(model_dir)
    with torch.no_grad():
        want, _ = response_logprobs(base, batch, "packed")
    reference = trainer.models.reference_logprobs("packed", 1.0)(batch)
    torch.testing.assert_close(reference, want, atol=1e-6, rtol=0)
    policy = trainer.models.logprobs(trainer.model, batch, "packed", 1.0)
    assert (policy - want).abs().max() > 1e-4  # the adapters moved the policy away from the base

    ckpt = out / "checkpoints" / "step-000002"
    assert (ckpt / "model" / "adapter_config.json").is_file()
    assert not (ckpt / "model" / "model.safetensors").exists()  # the adapter only

    evaluated, _ = load_policy(ckpt / "model")  # `grove eval --model .../model` on a LoRA checkpoint
    with torch.no_grad():
        got, _ = response_logprobs(evaluated, batch, "packed")
    torch.testing.assert_close(got, policy, atol=1e-5, rtol=0)

    exported = tmp_path / "merged"
    result = CliRunner().invoke(app, ["export", str(ckpt), str(exported)])
    assert result.exit_code == 0, result.output
    merged, _ = load_policy(exported)
    with torch.no_grad():
        got, _ = response_logprobs(merged, batch, "packed")
    torch.testing.assert_close(got, policy, atol=1e-5, rtol=0)


def test_lora_run_resumes_from_its_adapter(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    model_dir = create_tiny_model_dir(tmp_path / "tiny")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    Trainer(load_config(None, _overrides(model_dir, straight, 3)), straight).run()
    Trainer(load_config(None, _overrides(model_dir, resumed, 2)), resumed).run()
    Trainer(load_config(None, _overrides(model_dir, resumed, 3)), resumed, resume=True).run()
    from safetensors.torch import load_file

    a = load_file(straight / "checkpoints" / "step-000003" / "model" / "adapter_model.safetensors")
    b = load_file(resumed / "checkpoints" / "step-000003" / "model" / "adapter_model.safetensors")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
