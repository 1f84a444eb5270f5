"""LoRA adapters (grove.models.lora): trainable set, reference = adapters disabled, save/load, merged export, config
validation, the ``grove export`` command and the memory planner's LoRA accounting."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from grove.cli import app
from grove.config import ConfigError
from grove.config.lora_section import DEFAULT_TARGET_MODULES, LoraSettings
from grove.infra.memory_plan import ModelDims, RunShape, estimate_peak_bytes, lora_parameter_count
from grove.models.lora import (
    adapter_parameter_count,
    adapters_disabled,
    apply_lora,
    is_lora,
    load_adapter_weights,
    save_adapter,
    trainable_parameter_count,
)
from grove.models.merged_export import export_merged
from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import load_config

SETTINGS = LoraSettings(r=4, alpha=8)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("lora") / "tiny")


def _ids(vocab: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (2, 12), generator=g)


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def _train(model, ids: torch.Tensor, steps: int = 2) -> None:
    """A few AdamW steps on a random next-token loss (B is zero at first, so A moves from the second step)."""
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    targets = torch.randint(0, model.config.vocab_size, ids.shape, generator=torch.Generator().manual_seed(1))
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def _trained_lora(tiny):
    model, tokenizer = load_policy(tiny)
    peft_model = apply_lora(model, SETTINGS, base_name=str(tiny))
    _train(peft_model, _ids(peft_model.config.vocab_size))
    return peft_model, tokenizer


def test_only_adapters_train_and_the_count_matches_the_planner(tiny):
    model, _ = load_policy(tiny)
    expected = adapter_parameter_count(model, SETTINGS)
    peft_model = apply_lora(model, SETTINGS)
    assert is_lora(peft_model) and not is_lora(load_policy(tiny)[0])
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_A" in n or "lora_B" in n for n in trainable)
    # every targeted projection of both layers got A and B
    assert len(trainable) == 2 * len(DEFAULT_TARGET_MODULES) * 2
    assert trainable_parameter_count(peft_model) == expected == adapter_parameter_count(peft_model, SETTINGS)
    dims = ModelDims.from_model_dir(tiny)
    assert lora_parameter_count(dims, SETTINGS.r, SETTINGS.target_modules) == expected
    # hand count: hidden 64, 4 heads × 16, 2 kv heads × 16, intermediate 128, 2 layers, r 4
    per_layer = (64 + 64) + 2 * (64 + 32) + (64 + 64) + 3 * (64 + 128)
    assert expected == 2 * 4 * per_layer


def test_an_adamw_step_moves_adapters_only_and_disabling_them_gives_the_base_model(tiny):
    base, _ = load_policy(tiny)
    model, _ = load_policy(tiny)
    ids = _ids(base.config.vocab_size)
    base_logits = _logits(base, ids)
    peft_model = apply_lora(model, SETTINGS)
    assert torch.equal(_logits(peft_model, ids), base_logits)  # B = 0: the policy starts as the base
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    _train(peft_model, ids)
    for name, param in peft_model.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == ("lora_" in name), name
    assert any(p.abs().sum() > 0 for n, p in peft_model.named_parameters() if "lora_B" in n)
    assert not torch.allclose(_logits(peft_model, ids), base_logits)
    with adapters_disabled(peft_model):
        assert torch.equal(_logits(peft_model, ids), base_logits)
    assert not torch.allclose(_logits(peft_model, ids), base_logits)  # adapters back on
    with adapters_disabled(base):  # a plain model: a null context
        assert torch.equal(_logits(base, ids), base_logits)


def test_save_and_load_adapter_round_trip(tiny, tmp_path):
    peft_model, _ = _trained_lora(tiny)
    ids = _ids(peft_model.config.vocab_size, seed=3)
    save_adapter(peft_model, tmp_path / "a")
    assert {p.name for p in (tmp_path / "a").iterdir()} >= {"adapter_config.json", "adapter_model.safetensors"}
    # a full state dict (as gathered from sharded training) is filtered to the adapter
    save_adapter(peft_model, tmp_path / "b", state_dict=peft_model.state_dict())
    a, b = ((tmp_path / d / "adapter_model.safetensors").read_bytes() for d in "ab")
    assert a == b and len(a) < 4 * sum(p.numel() for p in peft_model.parameters())

    fresh = apply_lora(load_policy(tiny)[0], SETTINGS)
    assert not torch.equal(_logits(fresh, ids), _logits(peft_model, ids))
    load_adapter_weights(fresh, tmp_path / "b")
    assert torch.equal(_logits(fresh, ids), _logits(peft_model, ids))

    with pytest.raises(ValueError, match="lacks .* adapter entries"):
        save_adapter(peft_model, tmp_path / "c", state_dict={})
    with pytest.raises(FileNotFoundError, match="adapter_model.safetensors"):
        load_adapter_weights(fresh, tmp_path / "missing")
    other_rank = apply_lora(load_policy(tiny)[0], LoraSettings(r=2))
    with pytest.raises(ValueError, match="different rank"):
        load_adapter_weights(other_rank, tmp_path / "a")
    other_targets = apply_lora(load_policy(tiny)[0], LoraSettings(r=4, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="unexpected keys"):
        load_adapter_weights(other_targets, tmp_path / "a")
    with pytest.raises(TypeError, match="apply_lora"):
        save_adapter(load_policy(tiny)[0], tmp_path / "d")


def test_apply_lora_rejects_unknown_targets_and_the_head(tiny):
    model, _ = load_policy(tiny)
    with pytest.raises(ValueError, match=r"\['qkv_proj'\].*q_proj"):
        apply_lora(model, LoraSettings(target_modules=["q_proj", "qkv_proj"]))
    look_alike = SimpleNamespace(r=4, alpha=8.0, target_modules=["lm_head"], dropout=0.0)
    with pytest.raises(ValueError, match="output projection"):
        apply_lora(model, look_alike)
    assert not is_lora(model) and trainable_parameter_count(model) == sum(p.numel() for p in model.parameters())


def _lora_checkpoint(tiny, root):
    peft_model, tokenizer = _trained_lora(tiny)
    save_adapter(peft_model, root / "model")
    tokenizer.save_pretrained(root / "model")
    return peft_model


def test_export_merges_the_adapter_into_a_plain_model(tiny, tmp_path):
    peft_model = _lora_checkpoint(tiny, tmp_path / "step-2")
    out = export_merged(tmp_path / "step-2", tmp_path / "merged")
    assert out == tmp_path / "merged" and not (out / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert not is_lora(merged) and AutoTokenizer.from_pretrained(out, local_files_only=True) is not None
    ids = _ids(merged.config.vocab_size, seed=5)
    torch.testing.assert_close(_logits(merged, ids), _logits(peft_model, ids), atol=1e-5, rtol=0)

    with pytest.raises(FileExistsError, match="not empty"):
        export_merged(tmp_path / "step-2", out)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export_merged(tmp_path / "nowhere", tmp_path / "x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no model/ directory"):
        export_merged(tmp_path / "empty", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_export_copies_a_full_checkpoint(tiny, tmp_path):
    model, tokenizer = load_policy(tiny)
    _train(model, _ids(model.config.vocab_size), steps=1)
    model.save_pretrained(tmp_path / "step-1" / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp_path / "step-1" / "model")
    (tmp_path / "out").mkdir()  # an empty directory is fine
    out = export_merged(tmp_path / "step-1", tmp_path / "out")
    copy = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = _ids(model.config.vocab_size, seed=7)
    assert torch.equal(_logits(copy, ids), _logits(model, ids))


def test_export_command(tiny, tmp_path):
    _lora_checkpoint(tiny, tmp_path / "step-2")
    runner = CliRunner()
    ok = runner.invoke(app, ["export", str(tmp_path / "step-2"), str(tmp_path / "hf")])
    assert ok.exit_code == 0, ok.output
    assert "AutoModelForCausalLM.from_pretrained" in ok.output and (tmp_path / "hf" / "config.json").is_file()
    again = runner.invoke(app, ["export", str(tmp_path / "step-2"), str(tmp_path / "hf")])
    assert again.exit_code == 2 and "error:" in again.output and "not empty" in again.output
    missing = runner.invoke(app, ["export", str(tmp_path / "nowhere"), str(tmp_path / "hf2")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_config_section_validates_at_load_time():
    cfg = load_config(None, ["model.lora={r: 4, alpha: 8}"])
    assert cfg.model.lora == LoraSettings(r=4, alpha=8.0)
    assert cfg.model.lora.target_modules == list(DEFAULT_TARGET_MODULES)
    assert load_config(None, []).model.lora is None
    assert load_config(None, ["model.lora.r=2"]).model.lora.r == 2
    with pytest.raises(ConfigError, match=r"model\.lora\.target_modules: .*output projection"):
        load_config(None, ["model.lora={r: 4, alpha: 8, target_modules: [lm_head]}"])
    with pytest.raises(ConfigError, match=r"model\.lora\.target_modules: must name at least one"):
        load_config(None, ["model.lora={target_modules: []}"])
    with pytest.raises(ConfigError, match=r"model\.lora\.r: .*greater than or equal to 1"):
        load_config(None, ["model.lora={r: 0}"])
    with pytest.raises(ConfigError, match=r"model\.lora\.dropout"):
        load_config(None, ["model.lora={dropout: 1.0}"])
    with pytest.raises(ConfigError, match=r"model\.lora\.rank: unknown key"):
        load_config(None, ["model.lora={rank: 4}"])


def test_memory_plan_counts_adapters_and_no_reference_copy(tiny):
    dims = ModelDims.from_model_dir(tiny)
    shape = RunShape(prompt_tokens=16, max_new_tokens=8, prompts_per_step=2, group_size=4,
                     micro_batch_size=4, shared_prefix=True, reference_model=True)
    adapters = lora_parameter_count(dims, 4, list(DEFAULT_TARGET_MODULES))
    full = estimate_peak_bytes(dims, shape)
    lora = estimate_peak_bytes(dims, RunShape(**{**shape.__dict__, "lora_params": adapters}))
    assert lora["policy weights (fp32)"] == full["policy weights (fp32)"] == 4 * dims.num_params
    assert lora["LoRA adapters (fp32)"] == 4 * adapters and "LoRA adapters (fp32)" not in full
    assert lora["gradients (fp32)"] == 4 * adapters and lora["AdamW moments (fp32)"] == 8 * adapters
    assert lora["AdamW moments (fp32)"] < full["AdamW moments (fp32)"] / 10
    assert full["reference model"] == 4 * dims.num_params and lora["reference model"] == 0
    bf16 = {"compute_bytes": 2}  # with fp32 products one process adds the head's gradient in place: 0 either way
    assert estimate_peak_bytes(dims, RunShape(**{**shape.__dict__, **bf16, "lora_params": adapters}))[
        "output-projection gradient"] == 0
    assert estimate_peak_bytes(dims, RunShape(**{**shape.__dict__, **bf16}))["output-projection gradient"] > 0
    assert lora["total"] == pytest.approx(sum(v for k, v in lora.items() if k != "total"))
    assert lora_parameter_count(dims, 4, ["self_attn.q_proj"]) == 2 * 4 * (64 + 64)
    with pytest.raises(ValueError, match="c_attn"):
        lora_parameter_count(dims, 4, ["c_attn"])


def test_config_show_plans_a_lora_run(tiny):
    result = CliRunner().invoke(app, ["config", "show", "examples/arithmetic.yaml", "--set", f"model.name={tiny}",
                                      "--set", "model.lora={r: 4}", "--set", "algorithm.kl.coef=0.05"])
    assert result.exit_code == 0, result.output
    assert "LoRA adapters" in result.output
    row = next(line for line in result.output.splitlines() if "reference model" in line)
    assert "0.00" in row


def test_export_resolves_an_embedded_base_name(tiny, tmp_path, monkeypatch):
    import json

    import grove.models.pretrained as pretrained_module

    model, tokenizer = load_policy(tiny)
    peft_model = apply_lora(model, SETTINGS, base_name="smollm2-135m")
    _train(peft_model, _ids(peft_model.config.vocab_size))
    save_adapter(peft_model, tmp_path / "step-1" / "model")
    config = json.loads((tmp_path / "step-1" / "model" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "smollm2-135m" and config["r"] == 4
    asked = []
    monkeypatch.setattr(pretrained_module, "resolve_model_path", lambda name: asked.append(name) or tiny)
    out = export_merged(tmp_path / "step-1", tmp_path / "out")  # no tokenizer in model/: the base's is used
    assert asked == ["smollm2-135m"] and (out / "tokenizer_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ids = _ids(merged.config.vocab_size, seed=9)
    torch.testing.assert_close(_logits(merged, ids), _logits(peft_model, ids), atol=1e-5, rtol=0)
