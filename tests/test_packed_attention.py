"""Flex attention for packed rows: its block mask is the dense mask's rule, and the packed forward through it gives
the padded forward's (and the dense-mask packed forward's) log-probs, entropies and gradients."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from grove.models.packed_attention import packed_block_mask, packed_mask_mod, resolve_packed_attention
from grove.models.packed_forward import PackedLayout, policy_forward_packed
from grove.models.padded_forward import policy_forward
from grove.rollout.engine import SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine

flex = pytest.importorskip("torch.nn.attention.flex_attention")
# on a CPU flex attention runs PyTorch's unfused reference (what the value tests check), and says so once
pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
CUDA = torch.cuda.is_available()


def _layout(segment: torch.Tensor) -> PackedLayout:
    empty = torch.zeros(0, dtype=torch.long)
    return PackedLayout(segment.clamp(min=0), segment.clamp(min=0), segment, empty, empty)


def _segments() -> torch.Tensor:
    """Two rows: a prompt with three responses (two long, crossing tiles), and a prompt with one response + padding."""
    a = [0] * 20 + [1] * 300 + [2] * 3 + [3] * 197
    b = [0] * 7 + [1] * 200 + [-1] * (len(a) - 207)
    return torch.tensor([a, b])


def test_block_mask_is_the_dense_mask():
    """Materialised query by query, the flex mask equals the dense one (siblings and padding hidden)."""
    seg = _segments()
    t = seg.shape[1]
    dense = _layout(seg).attention_mask()
    block = packed_block_mask(seg)
    assert block.shape == (2, 1, t, t)
    materialised = flex.create_mask(block.mask_mod, 2, 1, t, t, device="cpu")
    assert torch.equal(materialised, dense)
    small = torch.tensor([[0, 0, 1, 1, 2, -1]])
    q, k = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    b = torch.zeros_like(q)
    assert torch.equal(packed_mask_mod(small)(b, b, q, k), _layout(small).attention_mask()[0, 0])


def test_block_mask_skips_exactly_the_hidden_tiles():
    """A 128 × 128 tile is computed iff some query in it sees some key in it: response 3's queries never load the
    tile of response 1's keys, and padding tiles are skipped but for their diagonal."""
    seg = _segments()
    t = seg.shape[1]
    block = packed_block_mask(seg)
    size = block.BLOCK_SIZE[0]
    tiles = block.to_dense().bool()  # [U, 1, q tiles, k tiles]: tiles computed (partially or fully)
    dense = _layout(seg).attention_mask()
    pad = -t % size
    padded = torch.nn.functional.pad(dense, (0, pad, 0, pad))
    n = padded.shape[-1] // size
    any_visible = padded.reshape(2, 1, n, size, n, size).any(-1).any(-2)
    assert torch.equal(tiles, any_visible)
    assert not tiles[0, 0, 3, 1]  # response 3's queries (384..511) never load response 1's keys (128..255)
    assert not tiles[1, 0, 3, :3].any()  # padding queries (384..511) load no earlier tile
    causal = n * (n + 1) // 2
    assert int(tiles[0].sum()) < causal and int(tiles[1].sum()) < causal


def _rollout(policy, prompts, g, seed, tokens):
    model, tokenizer = policy
    ids = encode_prompts(tokenizer, prompts, system_prompt=None, use_chat_template=True)
    eos = list(range(3, len(tokenizer), 5))  # varied response lengths
    engine = TransformersEngine(model, tokenizer, eos)
    out = engine.generate(ids, g, SamplingParams(temperature=1.0, max_new_tokens=tokens), torch.Generator().manual_seed(seed))
    assert len(set(out.response_mask.sum(1).tolist())) > 1
    return out


PROMPTS = ["What is 2+2?", "Solve for x: 2x + 3 = 11.", "Hi"]


@pytest.mark.parametrize("shared", [True, False])
def test_flex_packed_forward_equals_padded_and_dense_values(policy, shared):
    """No gradients (what a CPU runs flex attention for: reference and old-policy log-probs): three prompts with
    three responses each, packed per prompt or per sample, give the padded forward's values."""
    model = policy[0]
    out = _rollout(policy, PROMPTS, 3, 3, 9)
    args = (out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    prefix = out.prompt_index if shared else None
    kw = {"temperature": 0.8, "with_entropy": True}
    with torch.no_grad():
        lp_pad, ent_pad = policy_forward(model, *args, **kw)
        lp_dense, ent_dense = policy_forward_packed(model, *args, prefix, attention="dense_mask", **kw)
        lp_flex, ent_flex = policy_forward_packed(model, *args, prefix, attention="flex", **kw)
    torch.testing.assert_close(lp_flex, lp_pad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_flex, ent_pad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lp_flex, lp_dense, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent_flex, ent_dense, atol=1e-5, rtol=1e-5)
    assert (lp_flex[out.response_mask == 0] == 0).all()


def test_the_logprob_module_carries_its_packed_attention_to_every_layout(policy, monkeypatch):
    """``ResponseLogprobModule(lm, packed_attention)`` (what ``train.packed_attention`` builds) runs the packed rows
    with that kernel; the other layouts ignore it."""
    import grove.models.forward_layouts as layouts
    from grove.batch import RolloutBatch
    from grove.models.logprob_module import ResponseLogprobModule, response_logprobs

    model = policy[0]
    out = _rollout(policy, PROMPTS, 2, 5, 6)
    n = out.response_ids.shape[0]
    batch = RolloutBatch(
        prompt_ids=out.prompt_ids, prompt_mask=out.prompt_mask, response_ids=out.response_ids,
        response_mask=out.response_mask, loss_mask=out.response_mask.bool(), old_logprobs=out.logprobs,
        rewards=torch.zeros(n, 1), reward_names=("r",), group_index=out.prompt_index,
        trajectory_index=torch.arange(n), step_index=torch.zeros(n, dtype=torch.long),
        truncated=torch.zeros(n, dtype=torch.bool),
    )
    seen = []
    packed = layouts.policy_forward_packed
    monkeypatch.setattr(layouts, "policy_forward_packed", lambda *a, **k: seen.append(k["attention"]) or packed(*a, **k))
    with torch.no_grad():
        padded, _ = response_logprobs(model, batch, "padded")
        for kernel in ("flex", "dense_mask"):
            for layout in ("packed", "shared_prefix", "padded"):
                lp, _ = response_logprobs(ResponseLogprobModule(model, kernel), batch, layout)
                torch.testing.assert_close(lp, padded, atol=1e-5, rtol=1e-5)
        default, _ = response_logprobs(model, batch, "packed")
    torch.testing.assert_close(default, padded, atol=1e-5, rtol=1e-5)
    assert seen == ["flex", "dense_mask", "auto"]


def test_flex_on_cpu_with_gradients_is_refused(policy):
    model = policy[0]
    out = _rollout(policy, PROMPTS[:1], 2, 1, 5)
    args = (out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)
    with pytest.raises(NotImplementedError, match="no backward on a CPU"):
        policy_forward_packed(model, *args, out.prompt_index, attention="flex")


def test_auto_picks_flex_on_cuda_only_where_the_model_dispatches_it():
    sdpa = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"))
    eager = SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager"))
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_packed_attention("auto", sdpa, cuda) == "flex"
    assert resolve_packed_attention("auto", sdpa, cpu) == "dense_mask"
    assert resolve_packed_attention("auto", eager, cuda) == "dense_mask"
    assert resolve_packed_attention("dense_mask", sdpa, cuda) == "dense_mask"
    assert resolve_packed_attention("flex", sdpa, cpu) == "flex"
    with pytest.raises(NotImplementedError, match="'eager'"):
        resolve_packed_attention("flex", eager, cuda)
    with pytest.raises(ValueError, match="unknown packed attention"):
        resolve_packed_attention("varlen", sdpa, cuda)


def _values_and_grads(model, fn, *args, **kw):
    model.zero_grad()
    logp, ent = fn(model, *args, temperature=0.8, with_entropy=True, **kw)
    weights = torch.randn(logp.shape, generator=torch.Generator().manual_seed(0)).to(logp.device)
    ((logp * weights).sum() + ent.sum()).backward()
    return logp.detach().cpu(), ent.detach().cpu(), {n: p.grad.cpu().clone() for n, p in model.named_parameters()}


@pytest.mark.skipif(not CUDA, reason="PyTorch's flex attention has a backward on CUDA only")
@pytest.mark.parametrize("checkpointing", [False, True])
def test_flex_packed_forward_equals_padded_values_and_gradients_on_cuda(policy, checkpointing):
    """The training forward on a GPU: flex attention's values and parameter gradients equal the padded forward's
    and the dense-mask packed forward's (also when activation checkpointing recomputes the layers in backward)."""
    model = policy[0]
    out = _rollout(policy, PROMPTS, 3, 3, 9)
    model.cuda().train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        args = [x.cuda() for x in (out.prompt_ids, out.prompt_mask, out.response_ids, out.response_mask)]
        prefix = out.prompt_index.cuda()
        assert resolve_packed_attention("auto", model, args[0].device) == "flex"
        lp_a, ent_a, grad_a = _values_and_grads(model, policy_forward, *args)
        lp_b, ent_b, grad_b = _values_and_grads(model, policy_forward_packed, *args, prefix, attention="dense_mask")
        lp_c, ent_c, grad_c = _values_and_grads(model, policy_forward_packed, *args, prefix, attention="flex")
    finally:
        model.gradient_checkpointing_disable()
        model.cpu().eval()
    for lp, ent, grad in ((lp_b, ent_b, grad_b), (lp_c, ent_c, grad_c)):
        torch.testing.assert_close(lp, lp_a, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ent, ent_a, atol=1e-4, rtol=1e-4)
        for name in grad_a:
            torch.testing.assert_close(grad[name], grad_a[name], atol=5e-4, rtol=1e-3, msg=lambda m, n=name: f"{n}: {m}")


def test_the_compiled_kernel_stays_compiled_under_a_forced_eager_stance(monkeypatch):
    """A pass that forces compiled code to run eagerly (the token-details entropy pass, which keeps train.compile's
    layers eager) still runs flex attention compiled: no fall back to the unfused kernel, which materialises every
    score (dynamo's eager backend stands in for the CUDA kernel's compilation here)."""
    import warnings

    import grove.models.packed_attention as packed

    compiled = torch.compile(flex.flex_attention, backend="eager", dynamic=False)
    monkeypatch.setattr(packed, "_flex_kernel", lambda device: compiled)
    seg = _segments()
    q, k = torch.randn(2, 4, seg.shape[1], 8), torch.randn(2, 2, seg.shape[1], 8)
    torch._dynamo.reset()
    monkeypatch.setattr(flex, "_WARNINGS_SHOWN", set())  # the eager kernel's warning is shown once a process
    with warnings.catch_warnings(record=True) as caught, torch.compiler.set_stance("force_eager"):
        warnings.simplefilter("always")
        out, _ = packed._flex_forward(None, q, k, k, packed_block_mask(seg), scaling=0.3)
    assert not [w for w in caught if "without torch.compile" in str(w.message)]
    expected = flex.flex_attention(q, k, k, block_mask=packed_block_mask(seg), scale=0.3, enable_gqa=True)
    torch.testing.assert_close(out, expected.transpose(1, 2))
