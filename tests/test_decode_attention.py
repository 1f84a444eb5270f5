"""One-token decode attention as two matmuls (``grove_sdpa``): equal to PyTorch's SDPA, and the engine samples
the same tokens with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grove.rollout.decode_attention import IMPLEMENTATION, decode_attention
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("mask_kind", ["bool", "additive", "none"])
def test_matches_sdpa_with_grouped_heads_and_padding(dtype, tol, mask_kind):
    torch.manual_seed(0)
    batch, heads, kv_heads, length, dim = 5, 6, 2, 11, 8
    q = torch.randn(batch, heads, 1, dim, dtype=dtype)
    k = torch.randn(batch, kv_heads, length, dim, dtype=dtype)
    v = torch.randn(batch, kv_heads, length, dim, dtype=dtype)
    keep = torch.ones(batch, 1, 1, length, dtype=torch.bool)
    keep[1, ..., :4] = False  # left padding of row 1
    mask = {"bool": keep, "additive": torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, float("-inf")),
            "none": None}[mask_kind]
    expected = F.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(3, dim=1), v.float().repeat_interleave(3, dim=1),
        attn_mask=None if mask is None else (mask if mask.dtype == torch.bool else mask.float()), scale=0.3,
    )
    got = decode_attention(q, k, v, mask, 0.3)
    assert got.shape == q.shape and got.dtype == dtype
    torch.testing.assert_close(got.float(), expected, atol=tol, rtol=tol)


def test_engine_samples_the_same_tokens_as_with_sdpa(policy, monkeypatch):
    import grove.rollout.decode_attention as module

    calls = []
    original = module.decode_attention
    monkeypatch.setattr(module, "decode_attention", lambda *a: calls.append(a[0].shape) or original(*a))
    model, tokenizer = policy
    prompts = encode_prompts(tokenizer, ["What is 2+2?", "Hi"], system_prompt=None, use_chat_template=True)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[])
    assert model.config._attn_implementation == IMPLEMENTATION
    ours = engine.generate(prompts, 3, sampling, torch.Generator().manual_seed(1))
    model.set_attn_implementation("sdpa")
    try:
        reference = engine.generate(prompts, 3, sampling, torch.Generator().manual_seed(1))
    finally:
        model.set_attn_implementation(IMPLEMENTATION)
    assert calls and all(shape[2] == 1 for shape in calls)  # the decode steps went through the matmul form
    assert torch.equal(ours.response_ids, reference.response_ids)
    torch.testing.assert_close(ours.logprobs, reference.logprobs, atol=1e-5, rtol=1e-5)
