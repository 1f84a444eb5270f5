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


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_several_query_tokens_with_padding_match_sdpa_and_stay_finite(dtype, tol):
    """A prefill's new tokens against cached ones (left-padded rows, a causal mask): SDPA's values on every query
    that attends to something; a pad's query that attends to nothing gets finite numbers, not NaN."""
    torch.manual_seed(0)
    batch, heads, kv_heads, cached, new, dim = 3, 6, 2, 7, 5, 8
    q = torch.randn(batch, heads, new, dim, dtype=dtype)
    k = torch.randn(batch, kv_heads, cached + new, dim, dtype=dtype)
    v = torch.randn(batch, kv_heads, cached + new, dim, dtype=dtype)
    keys_real = torch.ones(batch, cached + new, dtype=torch.bool)
    keys_real[1, :4] = False  # row 1: a shorter cached prefix
    keys_real[2, : cached + 2] = False  # row 2: nothing cached, two left pads among the new tokens
    causal = torch.ones(new, cached + new, dtype=torch.bool).tril(cached)
    mask = (causal[None] & keys_real[:, None, :])[:, None]  # [B, 1, new, T]
    attends = mask.any(-1)[:, 0]  # [B, new]
    assert not attends.all()  # some pad query sees nothing
    expected = F.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(3, dim=1), v.float().repeat_interleave(3, dim=1), attn_mask=mask, scale=0.3
    )
    got = decode_attention(q, k, v, mask, 0.3)
    assert got.shape == q.shape and torch.isfinite(got).all()
    rows = attends[:, None, :, None].expand_as(got)
    torch.testing.assert_close(got.float()[rows], expected[rows], atol=tol, rtol=tol)


def test_generation_prefills_through_the_matmuls_sample_as_with_sdpa(policy, monkeypatch):
    """The prefill route (bf16 generation: ``_matmul_prefill``), taken here in fp32 so that the samples can be
    compared exactly: with padded prompts and prefixes reused across calls, the same tokens as SDPA for a fixed
    seed, log-probs to 1e-5 (the bf16 arithmetic itself: the test above)."""
    import grove.rollout.decode_attention as module

    calls = []
    original = module.decode_attention
    monkeypatch.setattr(module, "decode_attention", lambda *a: calls.append(a[0].shape) or original(*a))
    monkeypatch.setattr(module, "_matmul_prefill", lambda q, k: True)
    model, tokenizer = policy
    prompts = encode_prompts(tokenizer, ["What is 2+2?", "Hi", "Solve for x: 2x + 3 = 11."], system_prompt=None,
                             use_chat_template=True)
    follow_ups = [p + [5, 6, 7] for p in prompts]  # the next call reuses each row's cached prefix
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[])

    def both_calls():
        with engine.reusing_prefixes():
            return [engine.generate(p, 2, sampling, torch.Generator().manual_seed(4)) for p in (prompts, follow_ups)]

    ours = both_calls()
    assert any(shape[2] > 1 for shape in calls)  # prefills went through the matmul form
    model.set_attn_implementation("sdpa")
    try:
        reference = both_calls()
    finally:
        model.set_attn_implementation(IMPLEMENTATION)
    for a, b in zip(ours, reference, strict=True):
        assert torch.equal(a.response_ids, b.response_ids)
        torch.testing.assert_close(a.logprobs, b.logprobs, atol=1e-5, rtol=1e-5)


def test_only_bf16_no_grad_cpu_prefills_with_a_mask_take_the_matmuls():
    from grove.rollout.decode_attention import _cpu_generation_prefill, _matmul_prefill

    q16, q32 = torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16), torch.zeros(1, 2, 3, 4)
    cached, uncached = torch.zeros(1, 1, 5, 4, dtype=torch.bfloat16), torch.zeros(1, 1, 3, 4, dtype=torch.bfloat16)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    with torch.no_grad():
        assert _cpu_generation_prefill(q16, mask) and _cpu_generation_prefill(q32, mask)
        assert not _cpu_generation_prefill(q16, None) and not _cpu_generation_prefill(q16, mask[0, 0])
    assert not _cpu_generation_prefill(q16, mask)  # with autograd (a training forward)
    assert _matmul_prefill(q16, cached)  # new tokens against cached ones
    assert not _matmul_prefill(q32, cached)  # fp32: grouped-query SDPA instead
    assert not _matmul_prefill(q16, uncached)  # a whole sequence without a cache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_grad_prefill_with_a_mask_equals_transformers_sdpa(dtype):
    """``grove_sdpa`` on a several-token query with a padding mask (grouped-query SDPA in fp32, the matmuls in
    bf16) against transformers' ``sdpa`` (which repeats the keys and values per head)."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from grove.rollout.decode_attention import _grove_sdpa

    torch.manual_seed(1)
    module = SimpleNamespace(num_key_value_groups=3, is_causal=True)
    q = torch.randn(4, 6, 5, 8, dtype=dtype)
    k, v = torch.randn(4, 2, 9, 8, dtype=dtype), torch.randn(4, 2, 9, 8, dtype=dtype)
    real = torch.ones(4, 9, dtype=torch.bool)
    real[1, :3] = False
    mask = (torch.ones(5, 9, dtype=torch.bool).tril(4)[None] & real[:, None])[:, None]
    with torch.no_grad():
        ours, _ = _grove_sdpa(module, q, k, v, mask, scaling=0.35)
        theirs, _ = sdpa_attention_forward(module, q, k, v, mask, scaling=0.35)
    if dtype == torch.float32:
        assert torch.equal(ours, theirs)  # the same kernel, reading the keys in place
    else:
        torch.testing.assert_close(ours.float(), theirs.float(), atol=2e-2, rtol=2e-2)
