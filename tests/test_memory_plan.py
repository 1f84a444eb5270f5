"""The peak-memory planner: hand-computed breakdown, parameter count from headers, CLI output."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from grove.cli import app
from grove.infra.memory_plan import ModelDims, RunShape, estimate_peak_bytes
from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir


def test_breakdown_by_hand():
    m = ModelDims(num_params=1000, hidden=4, intermediate=8, layers=2, kv_dim=2, vocab=10)
    r = RunShape(prompt_tokens=5, max_new_tokens=3, prompts_per_step=2, group_size=4,
                 micro_batch_size=4, shared_prefix=True, reference_model=True, logits_chunk=7)
    parts = estimate_peak_bytes(m, r)
    per_token_layer = 8 * 4 + 2 * 2 + 4 * 8  # 68 values
    assert parts["policy weights (fp32)"] == 4000 and parts["AdamW moments (fp32)"] == 8000
    assert parts["reference model"] == 4000
    assert parts["bf16 generation copy"] == 0
    with_copy = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "bf16_generation_copy": True}))
    assert with_copy["bf16 generation copy"] == 2000 and with_copy["total"] == parts["total"] + 2000
    # rollout.prepacked_weights without a bf16 copy: a copy in the model's dtype; with one, that copy is packed
    packed = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "packed_generation_copy": True}))
    assert packed["prepacked generation copy"] == 4000 and packed["total"] == parts["total"] + 4000
    both = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "packed_generation_copy": True, "bf16_generation_copy": True}))
    assert both["prepacked generation copy"] == 0 and both["total"] == with_copy["total"]
    # shared prefix: one group's prompt (5) + 4 completions × 3 new tokens = 17 tokens
    assert parts["activations (one micro-batch)"] == 17 * 2 * per_token_layer * 4
    assert parts["generation KV cache"] == 2 * 2 * 2 * 8 * (5 + 3) * 4
    # 4 completions × 3 tokens = 12 predicted rows: their softmax cache (8 bytes × 12 × 10) fits the default budget
    assert parts["output-projection softmax cache"] == 8 * 12 * 10 and "output-projection chunks" not in parts
    # one process: fp32 products are added into .grad in place; a bf16 product is a [V, H] bf16 buffer; several
    # processes: autograd carries the float32 [V, H] gradient
    assert parts["output-projection gradient"] == 0
    assert estimate_peak_bytes(m, RunShape(**{**r.__dict__, "compute_bytes": 2}))["output-projection gradient"] == 2 * 10 * 4
    ranks = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "processes": 2}))
    assert ranks["output-projection gradient"] == 4 * 10 * 4
    recompute = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "logit_cache_bytes": 8 * 12 * 10 - 1}))
    assert recompute["output-projection chunks"] == 8 * 7 * 10 and "output-projection softmax cache" not in recompute
    padded = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "shared_prefix": False}))
    assert padded["activations (one micro-batch)"] == 4 * 8 * 2 * per_token_layer * 4
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    # activation checkpointing: one hidden vector per layer and token, plus one layer's intermediates
    recomputed = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "activation_checkpointing": True}))
    assert recomputed["activations (one micro-batch)"] == 17 * (2 * 4 + per_token_layer) * 4
    halved = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "bf16_moments": True}))
    assert halved["AdamW moments (bf16)"] == 4000 and "AdamW moments (fp32)" not in halved


def test_per_rank_estimate_under_ddp_and_fsdp2_by_hand():
    m = ModelDims(num_params=1000, hidden=4, intermediate=8, layers=2, kv_dim=2, vocab=10)
    r = RunShape(prompt_tokens=5, max_new_tokens=3, prompts_per_step=2, group_size=4,
                 micro_batch_size=4, shared_prefix=True, reference_model=True)
    one = estimate_peak_bytes(m, r)
    ddp = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "processes": 2, "strategy": "ddp"}))
    fsdp = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "processes": 2, "strategy": "fsdp2"}))
    # ddp: the full model state on every rank; each rank generates one of the 2 groups (4 rows, not 8)
    assert ddp["AdamW moments (fp32)"] == one["AdamW moments (fp32)"] == 8000
    assert ddp["generation KV cache"] == one["generation KV cache"] / 2 == 2 * 2 * 2 * 4 * (5 + 3) * 4
    # fsdp2: weights, gradients, moments and the reference halved; a full fp32 replica to decode on; two layers'
    # parameters and gradients gathered: (1000 - 10·4) / 2 layers = 480 parameters each
    assert fsdp["policy weights (fp32)"] == 2000 and fsdp["AdamW moments (fp32)"] == 4000
    assert fsdp["gradients (fp32)"] == 2000 and fsdp["reference model"] == 2000
    assert fsdp["generation replica (full)"] == 4000 and fsdp["bf16 generation copy"] == 0
    assert fsdp["gathered layers (2, with gradients)"] == 2 * 2 * 4 * 480
    # rank 0 gathers the full weights and moments to write a checkpoint, under either strategy
    assert fsdp["checkpoint gather (rank 0)"] == ddp["checkpoint gather (rank 0)"] == 12 * 1000
    assert "checkpoint gather (rank 0)" not in one
    bf16 = estimate_peak_bytes(m, RunShape(**{**r.__dict__, "processes": 2, "strategy": "fsdp2",
                                               "bf16_generation_copy": True}))
    assert bf16["generation replica (full)"] == 2000 and bf16["bf16 generation copy"] == 0


def test_config_show_estimates_per_rank(tmp_path):
    path = create_tiny_model_dir(tmp_path / "m")
    result = CliRunner().invoke(app, ["config", "show", "--processes", "4", "--set", f"model.name={path}",
                                      "--set", "distributed.strategy=fsdp2"])
    assert result.exit_code == 0, result.output
    assert "per rank of 4 (fsdp2)" in result.output and "generation replica" in result.output


def test_param_count_from_safetensors_headers(tmp_path):
    path = create_tiny_model_dir(tmp_path / "m")
    model, _ = load_policy(path)
    dims = ModelDims.from_model_dir(path)
    assert dims.num_params == sum(p.numel() for p in model.parameters())
    assert dims.layers == model.config.num_hidden_layers


def test_config_show_prints_estimate_and_warns_when_it_cannot_fit(tmp_path):
    path = create_tiny_model_dir(tmp_path / "m")
    runner = CliRunner()
    ok = runner.invoke(app, ["config", "show", "examples/arithmetic.yaml", "--set", f"model.name={path}"])
    assert ok.exit_code == 0, ok.output
    assert "estimated peak memory" in ok.output and "AdamW moments" in ok.output and "warning" not in ok.output
    huge = runner.invoke(app, ["config", "show", "examples/arithmetic.yaml", "--set", f"model.name={path}",
                               "--set", "train.micro_batch_size=100000000", "--set", "train.prompts_per_step=100000000",
                               "--set", "train.forward=padded"])
    assert huge.exit_code == 0
    assert "warning" in huge.output and "micro_batch_size" in huge.output
