"""Training-side log-probs: they must equal the sampler's, and chunking must not change values or grads."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from grove.kernels.output_projection import (
    DEFAULT_CACHE_BYTES,
    _chunks,
    cache_bytes_needed,
    token_logprobs_and_entropy,
)
from grove.models.padded_forward import policy_forward
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine

PROMPTS = ["What is 2+2?", "Hi", "Solve for x: 2x + 3 = 11. Think step by step.", "Count: 1 2 3"]


@pytest.fixture(scope="module")
def prompt_ids(policy) -> list[list[int]]:
    return encode_prompts(policy[1], PROMPTS, system_prompt=None, use_chat_template=True)


def _rollout(policy, prompt_ids, temperature: float, **kw):
    model, tok = policy
    eos = list(range(3, len(tok), 4))  # many "eos" ids: completions of varied lengths
    engine = TransformersEngine(model, tok, eos)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=16, **kw)
    return engine.generate(prompt_ids, 3, sampling, torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("temperature", "extra"), [(0.7, {}), (1.0, {}), (0.7, {"top_k": 20, "top_p": 0.9})])
def test_rollout_logprobs_match_policy_forward(policy, prompt_ids, temperature, extra) -> None:
    out = _rollout(policy, prompt_ids, temperature, **extra)
    lengths = out.response_mask.sum(1)
    assert len(set(lengths.tolist())) > 1 and len({len(p) for p in prompt_ids}) > 1
    with torch.no_grad():
        logp, entropy = policy_forward(
            policy[0], out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask,
            temperature=temperature, chunk_size=7,
        )
    assert entropy is None
    assert logp.shape == out.logprobs.shape
    assert (logp[out.response_mask == 0] == 0).all()
    assert (logp - out.logprobs).abs().max().item() <= 1e-4


def test_greedy_rollout_logprobs_are_untempered(policy, prompt_ids) -> None:
    out = _rollout(policy, prompt_ids, 0.0)
    with torch.no_grad():
        logp, _ = policy_forward(policy[0], out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    assert (logp - out.logprobs).abs().max().item() <= 1e-4


def _naive_policy_logprobs(model, out, temperature):
    ids = torch.cat([out.prompt_ids, out.response_ids], 1)
    mask = torch.cat([out.prompt_mask, out.response_mask], 1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float() / temperature
    p = out.prompt_ids.shape[1]
    logp = torch.log_softmax(logits[:, p - 1 : -1], -1)
    lp = logp.gather(-1, out.response_ids[..., None]).squeeze(-1) * out.response_mask
    ent = -(logp.exp() * logp).sum(-1) * out.response_mask
    return lp, ent


def test_policy_forward_grad_and_entropy_match_naive(policy, prompt_ids) -> None:
    model = policy[0]
    out = _rollout(policy, prompt_ids, 0.7)
    logp, entropy = policy_forward(
        model, out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask,
        temperature=0.7, with_entropy=True, chunk_size=5,
    )
    assert logp.requires_grad and entropy is not None and entropy.requires_grad
    (logp.sum() + 0.1 * entropy.sum()).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    ref_lp, ref_ent = _naive_policy_logprobs(model, out, 0.7)
    (ref_lp.sum() + 0.1 * ref_ent.sum()).backward()
    torch.testing.assert_close(logp.detach(), ref_lp.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy.detach(), ref_ent.detach(), atol=1e-5, rtol=1e-5)
    assert (entropy[out.response_mask == 0] == 0).all()
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, atol=1e-5, rtol=1e-4, msg=name)
    model.zero_grad(set_to_none=True)


# ---------------------------------------------------------------------------- chunked log-probs


def _naive(hidden, weight, targets, temperature, bias=None):
    logits = hidden @ weight.T
    if bias is not None:
        logits = logits + bias
    logp = torch.log_softmax(logits.float() / temperature, -1)
    return logp.gather(-1, targets[:, None]).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 13, 64, 1024])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("cache", [True, False])
def test_chunked_equals_naive_values_and_grads(chunk_size: int, with_bias: bool, cache: bool) -> None:
    g = torch.Generator().manual_seed(0)
    t, h, v = 29, 16, 50
    hidden = torch.randn(t, h, generator=g, dtype=torch.float64).requires_grad_()
    weight = torch.randn(v, h, generator=g, dtype=torch.float64).requires_grad_()
    bias = torch.randn(v, generator=g, dtype=torch.float64).requires_grad_() if with_bias else None
    targets = torch.randint(0, v, (t,), generator=g)
    w_lp, w_ent = torch.randn(t, generator=g), torch.randn(t, generator=g)

    lp, ent = token_logprobs_and_entropy(
        hidden, weight, targets, temperature=0.7, chunk_size=chunk_size, with_entropy=True, bias=bias,
        cache_bytes=DEFAULT_CACHE_BYTES if cache else 0,
    )
    assert len(lp.grad_fn.kept) == (1 if cache else 0)
    assert lp.dtype == ent.dtype == torch.float32 and lp.shape == ent.shape == (t,)
    leaves = [x for x in (hidden, weight, bias) if x is not None]
    got = torch.autograd.grad((lp * w_lp).sum() + (ent * w_ent).sum(), leaves)

    ref_lp, ref_ent = _naive(hidden, weight, targets, 0.7, bias)
    want = torch.autograd.grad((ref_lp * w_lp).sum() + (ref_ent * w_ent).sum(), leaves)
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("through", ["logp", "entropy"])
@pytest.mark.parametrize("cache", [True, False])
def test_gradient_through_one_output_only(through: str, cache: bool) -> None:
    """An unused output gets no gradient (``None``), the other one's gradient is still exact."""
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(11, 8, generator=g, dtype=torch.float64).requires_grad_()
    weight = torch.randn(40, 8, generator=g, dtype=torch.float64).requires_grad_()
    targets = torch.randint(0, 40, (11,), generator=g)
    lp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=4, cache_bytes=10**9 if cache else 0)
    ref_lp, ref_ent = _naive(hidden, weight, targets, 1.0)
    out, ref = (lp, ref_lp) if through == "logp" else (ent, ref_ent)
    got = torch.autograd.grad((out * torch.arange(11.0)).sum(), (hidden, weight))
    want = torch.autograd.grad((ref * torch.arange(11.0)).sum(), (hidden, weight))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_second_backward_through_retained_graph_recomputes() -> None:
    """Cache mode rewrites its buffers in backward; a second backward (retain_graph) recomputes them."""
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(9, 8, generator=g).requires_grad_()
    weight = torch.randn(30, 8, generator=g).requires_grad_()
    targets = torch.randint(0, 30, (9,), generator=g)
    lp, ent = token_logprobs_and_entropy(hidden, weight, targets)
    loss = lp.sum() + 0.3 * ent.sum()
    first = torch.autograd.grad(loss, (hidden, weight), retain_graph=True)
    second = torch.autograd.grad(loss, (hidden, weight))
    for a, b in zip(first, second, strict=True):
        torch.testing.assert_close(a, b)


def test_bf16_autocast_matmuls_in_bf16_softmax_in_fp32() -> None:
    g = torch.Generator().manual_seed(4)
    hidden = torch.randn(12, 16, generator=g).requires_grad_()
    weight = (0.3 * torch.randn(64, 16, generator=g)).requires_grad_()
    targets = torch.randint(0, 64, (12,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lp, ent = token_logprobs_and_entropy(hidden, weight, targets)
    assert lp.dtype == ent.dtype == torch.float32
    got = torch.autograd.grad(lp.sum() + ent.sum(), (hidden, weight))
    assert got[0].dtype == got[1].dtype == torch.float32
    with torch.no_grad():  # the reference: a bf16 matmul (bf16-rounded logits), then the fp32 softmax
        ref_lp, ref_ent = _naive(hidden.bfloat16(), weight.bfloat16(), targets, 1.0)
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=1e-5, rtol=1e-5)
    fp32 = (hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_())
    want = torch.autograd.grad(sum(x.sum() for x in _naive(*fp32, targets, 1.0)), fp32)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=0.05, rtol=0.05)  # bf16 matmuls vs fp32 throughout


def test_bf16_weight_gradient_same_in_cache_and_recompute_modes_and_on_a_second_backward() -> None:
    """Under autocast the cached mode writes the weight gradient from one product; recompute mode accumulates
    chunk products: the same gradients; a second backward through a retained graph gives the first one's, and
    sharing the weight's cast between forward and backward (``reusing_weight_casts``) changes no bit."""
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(40, 16, generator=g).requires_grad_()
    weight = (0.3 * torch.randn(96, 16, generator=g)).requires_grad_()
    targets = torch.randint(0, 96, (40,), generator=g)
    grads = {}
    for cache in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=40 if cache else 8,
                                                 cache_bytes=10**9 if cache else 0)
        loss = lp.sum() + 0.5 * ent.sum()
        grads[cache] = torch.autograd.grad(loss, (hidden, weight), retain_graph=True)
        again = torch.autograd.grad(loss, (hidden, weight))
        for a, b in zip(grads[cache], again, strict=True):
            assert a.dtype == torch.float32
            torch.testing.assert_close(a, b)
    for a, b in zip(grads[True], grads[False], strict=True):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
    from grove.kernels.output_projection import reusing_weight_casts

    with reusing_weight_casts():  # as in the update: forward and backward share one cast of the weight
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=40, cache_bytes=10**9)
        reused = torch.autograd.grad(lp.sum() + 0.5 * ent.sum(), (hidden, weight))
    for a, b in zip(reused, grads[True], strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


@pytest.mark.parametrize("cache", [True, False])
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_weight_gradient_added_in_place_equals_autograds(cache: bool, bf16: bool, tied: bool) -> None:
    """``accumulating_weight_gradient_in_place``: over two micro-batches, ``weight.grad`` is the sum autograd
    accumulates (a tied weight also receives an embedding lookup's gradient through autograd), the other inputs'
    gradients are unchanged, and autograd delivers no gradient for the projection's part (``None`` to a tensor
    hook of an untied weight)."""
    from grove.kernels.output_projection import accumulating_weight_gradient_in_place, reusing_weight_casts

    g = torch.Generator().manual_seed(6)
    v, h = 96, 16
    weight = (0.3 * torch.randn(v, h, generator=g)).requires_grad_()
    batches = []
    for t in (40, 23):
        ids = torch.randint(0, v, (t,), generator=g)
        batches.append((ids, torch.randn(t, h, generator=g), torch.randint(0, v, (t,), generator=g)))
    calls = []
    weight.register_hook(lambda grad: calls.append(grad is not None))

    def run(in_place: bool):
        weight.grad, calls[:] = None, []
        hidden_grads = []
        block = accumulating_weight_gradient_in_place() if in_place else nullcontext()
        with block, reusing_weight_casts():
            for ids, noise, targets in batches:
                base = noise.clone().requires_grad_()
                hidden = base + weight[ids] if tied else base  # the input embedding, tied to the head
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    lp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=8,
                                                         cache_bytes=10**9 if cache else 0)
                (lp.sum() + 0.5 * ent.sum()).backward()
                hidden_grads.append(base.grad)
        return weight.grad.clone(), hidden_grads, list(calls)

    want, want_h, autograd_calls = run(False)
    got, got_h, in_place_calls = run(True)
    assert got.dtype == torch.float32 and autograd_calls == [True, True]
    assert in_place_calls == [tied, tied]  # tied: the embedding's part still arrives through autograd
    tol = {"atol": 1e-2, "rtol": 1e-2} if bf16 else {"atol": 1e-6, "rtol": 1e-5}  # only the order of the sums
    torch.testing.assert_close(got, want, **tol)
    for a, b in zip(got_h, want_h, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_weight_gradient_in_place_only_inside_the_block_and_only_for_a_leaf() -> None:
    """Outside the block, and for a weight that is not a leaf (a cast, a gathered shard), the gradient goes
    through autograd as usual."""
    from grove.kernels.output_projection import accumulating_weight_gradient_in_place

    g = torch.Generator().manual_seed(7)
    leaf = torch.randn(30, 8, generator=g, requires_grad=True)
    hidden, targets = torch.randn(5, 8, generator=g), torch.randint(0, 30, (5,), generator=g)
    with accumulating_weight_gradient_in_place():
        weight = leaf * 1.0  # not a leaf
        lp, _ = token_logprobs_and_entropy(hidden, weight, targets)
        (grad,) = torch.autograd.grad(lp.sum(), weight)
    (want,) = torch.autograd.grad(_naive(hidden, leaf, targets, 1.0)[0].sum(), leaf)
    torch.testing.assert_close(grad, want)
    assert leaf.grad is None
    lp, _ = token_logprobs_and_entropy(hidden, leaf, targets)  # the block has closed
    (grad,) = torch.autograd.grad(lp.sum(), leaf)
    torch.testing.assert_close(grad, want)


def test_weight_casts_are_reused_within_a_block_until_the_weight_changes() -> None:
    from grove.kernels import output_projection as op

    weight = torch.randn(50, 8, requires_grad=True)
    assert op._cast_weight(weight, torch.bfloat16) is not op._cast_weight(weight, torch.bfloat16)  # no block
    with op.reusing_weight_casts():
        first = op._cast_weight(weight, torch.bfloat16)
        assert op._cast_weight(weight, torch.bfloat16) is first
        with torch.no_grad():
            weight.add_(1.0)  # an optimizer step: the version counter moves, the cast is redone
        second = op._cast_weight(weight, torch.bfloat16)
        assert second is not first and torch.equal(second, weight.detach().bfloat16())
        assert op._cast_weight(weight, torch.float32) is weight
    assert op._weight_casts is None


def test_chunks_are_even() -> None:
    assert _chunks(326, 256) == [(0, 163), (163, 326)]
    assert _chunks(256, 256) == [(0, 256)]
    assert _chunks(7, 3) == [(0, 3), (3, 6), (6, 7)]
    assert _chunks(0, 8) == []
    assert cache_bytes_needed(10, 100) == 8000


def test_chunked_without_entropy_and_without_grad() -> None:
    g = torch.Generator().manual_seed(1)
    hidden, weight = torch.randn(10, 8, generator=g), torch.randn(30, 8, generator=g)
    targets = torch.randint(0, 30, (10,), generator=g)
    with torch.no_grad():
        lp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=3, with_entropy=False)
    assert ent is None and not lp.requires_grad
    torch.testing.assert_close(lp, _naive(hidden, weight, targets, 1.0)[0])
    hidden.requires_grad_()
    lp, _ = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=3, with_entropy=False)
    (grad,) = torch.autograd.grad(lp.sum(), hidden)
    (want,) = torch.autograd.grad(_naive(hidden, weight, targets, 1.0)[0].sum(), hidden)
    torch.testing.assert_close(grad, want)


@pytest.mark.parametrize("cache", [True, False])
def test_output_projection_memory_modes(cache: bool) -> None:
    """Recompute mode keeps no ``[rows, V]`` tensor for backward; cache mode keeps exactly its
    probabilities and log-probs (``cache_bytes_needed``), and switches at that threshold."""
    t, h, v = 64, 4, 1000
    hidden = torch.randn(t, h, requires_grad=True)
    weight = torch.randn(v, h, requires_grad=True)
    targets = torch.randint(0, v, (t,))
    saved: list[tuple[int, ...]] = []

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved.append(tuple(x.shape))
        return x

    need = cache_bytes_needed(t, v)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        lp, ent = token_logprobs_and_entropy(hidden, weight, targets, chunk_size=8, cache_bytes=need if cache else need - 1)
    kept = lp.grad_fn.kept
    assert all(shape[-1] != v or shape == (v, h) for shape in saved)  # only the weight itself
    if cache:
        assert [tuple(x.shape) for pair in kept for x in pair] == [(t, v), (t, v)]
        assert sum(x.numel() * x.element_size() for pair in kept for x in pair) == need
    else:
        assert kept == []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        _naive(hidden, weight, targets, 1.0)
    assert any(shape == (t, v) for shape in saved)  # the naive computation does keep [T, V] tensors
    (lp.sum() + ent.sum()).backward()
    assert hidden.grad is not None and weight.grad is not None
    assert lp.grad_fn.kept == []  # consumed by backward


def _values_and_grads(model, fn, *args):
    """Log-probs, entropies and all parameter gradients of a random linear functional of them."""
    model.zero_grad()
    logp, ent = fn(model, *args, temperature=0.8, with_entropy=True)
    weights = torch.randn(logp.shape, generator=torch.Generator().manual_seed(0))
    ((logp * weights).sum() + ent.sum()).backward()
    return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_shared_prefix_forward_equals_padded_forward_values_and_gradients(policy):
    """Each prompt encoded once and fanned out to its G responses: same log-probs, entropies and gradients."""
    from grove.models.shared_prefix_forward import policy_forward_shared_prefix, shares_prefixes

    model, tokenizer = policy
    model.train()
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Solve for x: 2x + 3 = 11."], system_prompt=None,
                         use_chat_template=True)
    engine = TransformersEngine(model, tokenizer)
    out = engine.generate(ids, 3, SamplingParams(temperature=1.0, max_new_tokens=7), torch.Generator().manual_seed(3))
    args = (out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    assert shares_prefixes(out.prompt_ids, out.prompt_mask, out.prompt_index)
    assert not shares_prefixes(out.prompt_ids, out.prompt_mask, torch.zeros_like(out.prompt_index))

    def run(fn, *extra):
        return _values_and_grads(model, fn, *args, *extra)

    lp_a, ent_a, grad_a = run(policy_forward)
    lp_b, ent_b, grad_b = run(policy_forward_shared_prefix, out.prompt_index)
    torch.testing.assert_close(lp_b, lp_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, atol=1e-5, rtol=1e-5)
    for name in grad_a:
        # the layouts sum the same terms in another order: a few embedding-gradient entries differ by ~2e-5 where
        # the CPU's kernels accumulate in 8 lanes (AVX2) rather than 16
        torch.testing.assert_close(grad_b[name], grad_a[name], atol=5e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    model.eval()


@pytest.mark.parametrize("shared", [True, False])
def test_packed_forward_equals_padded_forward_values_and_gradients(policy, shared):
    """Padding-free packed rows (each prompt once, responses back to back under a block mask): same
    log-probs, entropies and parameter gradients as the padded forward, with or without prompt sharing."""
    from grove.models.packed_forward import pack_by_prefix, policy_forward_packed

    model, tokenizer = policy
    model.train()
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Solve for x: 2x + 3 = 11.", "Hi"], system_prompt=None,
                         use_chat_template=True)
    eos = list(range(3, len(tokenizer), 5))  # varied response lengths, so packing really moves tokens
    engine = TransformersEngine(model, tokenizer, eos)
    out = engine.generate(ids, 3, SamplingParams(temperature=1.0, max_new_tokens=9), torch.Generator().manual_seed(3))
    assert len(set(out.response_mask.sum(1).tolist())) > 2 and len(set(out.prompt_mask.sum(1).tolist())) > 1
    args = (out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    prefix = out.prompt_index if shared else None
    layout = pack_by_prefix(*args, out.prompt_index if shared else torch.arange(len(out.prompt_index)))
    real = int(out.response_mask.sum()) + int(out.prompt_mask.sum() if not shared else out.prompt_mask[::3].sum())
    assert int((layout.segment >= 0).sum()) == real  # every real token exactly once, nothing else

    def run(fn, *extra):
        return _values_and_grads(model, fn, *args, *extra)

    lp_a, ent_a, grad_a = run(policy_forward)
    lp_b, ent_b, grad_b = run(policy_forward_packed, prefix)
    torch.testing.assert_close(lp_b, lp_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, atol=1e-5, rtol=1e-5)
    assert (lp_b[out.response_mask == 0] == 0).all()
    # fp32 summation-order rounding: gradients reach |g| ≈ 60 here and differ by ≤ 6e-5 between layouts
    for name in grad_a:
        torch.testing.assert_close(grad_b[name], grad_a[name], atol=5e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    model.eval()


def test_packed_attention_mask_hides_siblings_and_padding():
    from grove.models.packed_forward import PackedLayout

    seg = torch.tensor([[0, 0, 1, 1, 2, -1]])
    layout = PackedLayout(seg.clamp(min=0), seg.clamp(min=0), seg, torch.zeros(0), torch.zeros(0))
    m = layout.attention_mask()[0, 0].int()
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],  # response 2 sees the prompt and itself, not response 1
        [0, 0, 0, 0, 0, 1],  # padding sees only itself (no empty softmax row)
    ])
    assert torch.equal(m, expected)


@pytest.mark.parametrize("layout", ["padded", "shared_prefix", "packed"])
def test_scoring_only_some_response_tokens_keeps_their_values_and_gradients(policy, layout):
    """``scored_mask`` (an agent sample's policy tokens): the scored tokens' log-probs, entropies and every
    parameter gradient equal those of scoring all tokens and masking the rest afterwards; unscored tokens get 0."""
    from grove.models.packed_forward import policy_forward_packed
    from grove.models.shared_prefix_forward import policy_forward_shared_prefix

    model, tokenizer = policy
    model.train()
    ids = encode_prompts(tokenizer, ["What is 2+2?", "Solve for x: 2x + 3 = 11."], system_prompt=None,
                         use_chat_template=True)
    engine = TransformersEngine(model, tokenizer, [])
    out = engine.generate(ids, 2, SamplingParams(temperature=1.0, max_new_tokens=8), torch.Generator().manual_seed(5))
    scored = torch.zeros_like(out.response_mask, dtype=torch.bool)
    scored[:, 2:5] = True  # the middle tokens are the policy's, the rest context (environment tokens)
    scored[1, 0] = True
    forward = {
        "padded": policy_forward,
        "shared_prefix": lambda *a, **k: policy_forward_shared_prefix(*a, out.prompt_index, **k),
        "packed": lambda *a, **k: policy_forward_packed(*a, out.prompt_index, **k),
    }[layout]
    args = (out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    weights = torch.randn(out.response_ids.shape, generator=torch.Generator().manual_seed(0)) * scored

    def values_and_grads(**kw):
        model.zero_grad()
        logp, ent = forward(model, *args, temperature=0.8, with_entropy=True, **kw)
        ((logp * weights).sum() + (ent * scored).sum()).backward()
        return logp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    lp_all, ent_all, grad_all = values_and_grads()
    lp, ent, grad = values_and_grads(scored_mask=scored)
    torch.testing.assert_close(lp[scored], lp_all[scored], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent[scored], ent_all[scored], atol=1e-5, rtol=1e-5)
    assert (lp[~scored] == 0).all() and (ent[~scored] == 0).all()
    assert (lp_all[out.response_mask.bool() & ~scored] != 0).any()  # scoring all would have given them values
    for name in grad_all:
        torch.testing.assert_close(grad[name], grad_all[name], atol=5e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    model.eval()


def test_shared_prefixes_are_each_groups_common_leading_tokens():
    from grove.models.shared_prefix_forward import shared_prefixes

    pad = 0
    prompts = torch.tensor([[pad, 5, 6, 7, 8], [5, 6, 7, 9, 9], [pad, pad, 5, 6, 1], [pad, 3, 4, 5, 6], [pad, 3, 4, 5, 6]])
    mask = (torch.arange(5)[None, :] >= torch.tensor([1, 0, 2, 1, 1])[:, None]).long()
    groups = shared_prefixes(prompts, mask, torch.tensor([0, 0, 0, 1, 1]))
    assert groups.shared.tolist() == [2, 3]  # [5, 6] in common; identical prompts keep their last token apart
    assert groups.inverse.tolist() == [0, 0, 0, 1, 1] and groups.lengths.tolist() == [4, 5, 3, 4, 4]
    assert groups.aligned[2, :3].tolist() == [5, 6, 1]
    assert groups.positions_run == 2 + 3 + 5 * 3  # each prefix once, every row's rest padded to the longest (3)


@pytest.mark.parametrize("layout", ["shared_prefix", "packed"])
def test_prompts_sharing_only_their_beginning_run_it_once_with_the_padded_forwards_values_and_gradients(
    policy, layout, monkeypatch
):
    """An agent's per-step prompts: the same instructions, then different observations. The shared-prefix forward
    (and the packed layout, which picks it when it runs fewer positions) equals the padded forward."""
    from grove.models.forward_layouts import layout_logprobs
    from grove.models.shared_prefix_forward import shared_prefixes

    model, tokenizer = policy
    model.train()
    system = "You walk on a frozen lake drawn as a grid; reach the goal without falling into a hole. " * 2
    texts = ["P . H\n. . G", "P . .\nH . G\n(step 2)", "P H .\n. . G, where next?", "It is dark.", "A room."]
    ids = encode_prompts(tokenizer, texts, system_prompt=system, use_chat_template=True)
    engine = TransformersEngine(model, tokenizer, [])
    out = engine.generate(ids, 1, SamplingParams(temperature=1.0, max_new_tokens=4), torch.Generator().manual_seed(2))
    group = torch.tensor([0, 0, 0, 1, 1])
    groups = shared_prefixes(out.prompt_ids, out.prompt_mask, group)
    assert (groups.shared > 20).all() and (groups.shared < groups.lengths[groups.first] - 1).all()
    n, r = out.response_ids.shape
    batch = SimpleNamespace(  # what a forward layout reads of a RolloutBatch
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, response_ids=out.response_ids,
        response_mask=out.response_mask, group_index=group, token_steps=None,
    )
    weights = torch.randn((n, r), generator=torch.Generator().manual_seed(0))

    def values_and_grads(name):
        model.zero_grad()
        logp, ent = layout_logprobs(model, batch, name, temperature=0.8, with_entropy=True)
        ((logp * weights).sum() + ent.sum()).backward()
        return logp.detach(), ent.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}

    import grove.models.forward_layouts as layouts_module
    import grove.models.shared_prefix_forward as shared_module

    calls = []
    real = shared_module.forward_with_shared_prefixes
    for module in (layouts_module, shared_module):
        monkeypatch.setattr(module, "forward_with_shared_prefixes", lambda *a, **k: calls.append(1) or real(*a, **k))
    lp_a, ent_a, grad_a = values_and_grads("padded")
    lp_b, ent_b, grad_b = values_and_grads(layout)
    assert calls == [1]  # the shared-prefix forward ran (packed picks it: fewer positions than a row per sample)
    torch.testing.assert_close(lp_b, lp_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_b, ent_a, atol=1e-5, rtol=1e-5)
    for name in grad_a:
        torch.testing.assert_close(grad_b[name], grad_a[name], atol=5e-5, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
    model.eval()
