"""Float32 top logits for a bfloat16 output projection: values, the whole-row fallback, the hook's scope, and
greedy generation from a bf16 copy that picks the float32 argmax."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grove.models.pretrained import load_policy
from grove.rollout.engine import SamplingParams
from grove.rollout.exact_logits import exact_top_logits, output_weight, refine_top_logits
from grove.rollout.generation_weights import GenerationWeights
from grove.rollout.hf_engine import TransformersEngine
from grove.rollout.prepacked_linear import PrepackedLinear, prepacking_supported


def _reference(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The float32 product of the (exactly upcast) low-precision operands."""
    out = hidden.double() @ weight.double().T
    return (out + bias.double() if bias is not None else out).float()


def test_top_logits_are_the_float32_products_and_the_rest_the_rounded_ones():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(5, 32, generator=g).bfloat16()
    weight = torch.randn(300, 32, generator=g).bfloat16()
    rounded = hidden @ weight.T
    refined = refine_top_logits(rounded, hidden, weight, candidates=16)
    exact = _reference(hidden, weight)
    top = rounded.topk(16, dim=-1).indices
    assert refined.dtype == torch.float32 and refined.shape == rounded.shape
    assert torch.allclose(refined.gather(-1, top), exact.gather(-1, top), atol=1e-5, rtol=0)
    others = torch.ones_like(refined, dtype=torch.bool).scatter_(-1, top, False)
    assert torch.equal(refined[others], rounded.float()[others])
    assert torch.equal(refined.argmax(-1), exact.argmax(-1))


def test_rounding_ties_are_resolved_as_float32_does():
    # two candidates 0.01 apart near 20: bfloat16 keeps 20.0 for both (its step there is 0.125), and argmax of the
    # rounded logits takes the lower token id, the wrong one
    weight = torch.zeros(8, 2, dtype=torch.bfloat16)
    weight[:, 0] = torch.tensor([1.0, 1.0, 0.5, 0.25, 0.0, -1.0, 0.75, 0.5], dtype=torch.bfloat16)
    weight[1, 1] = 2.0**-7  # token 1 is larger by 0.0078125 * hidden[1]
    hidden = torch.tensor([[20.0, 1.25]], dtype=torch.bfloat16)
    rounded = hidden @ weight.T
    assert rounded[0, 0] == rounded[0, 1] and int(rounded.argmax()) == 0
    refined = refine_top_logits(rounded, hidden, weight, candidates=2)
    assert int(refined.argmax()) == 1 == int(_reference(hidden, weight).argmax())


def test_a_row_whose_maximum_is_not_certain_is_recomputed_whole():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(4, 16, generator=g).bfloat16()
    weight = (torch.randn(1, 16, generator=g) + 1e-3 * torch.randn(200, 16, generator=g)).bfloat16()  # near-equal rows
    bias = (1e-3 * torch.randn(200, generator=g)).bfloat16()
    rounded = torch.nn.functional.linear(hidden, weight, bias)
    refined = refine_top_logits(rounded, hidden, weight, candidates=3, bias=bias)
    assert torch.allclose(refined, _reference(hidden, weight, bias), atol=1e-5, rtol=0)  # every row, every token


def test_several_positions_and_a_whole_vocabulary_of_candidates():
    g = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 3, 8, generator=g).half()
    weight = torch.randn(10, 8, generator=g).half()
    rounded = hidden @ weight.T
    refined = refine_top_logits(rounded, hidden, weight, candidates=64)  # more candidates than tokens
    assert refined.shape == (2, 3, 10)
    assert torch.allclose(refined, _reference(hidden, weight), atol=1e-5, rtol=0)


class _Head(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.lm_head = linear

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(x)


def test_the_hook_acts_only_inside_the_context_and_only_on_low_precision_outputs():
    torch.manual_seed(3)
    model = _Head(nn.Linear(16, 100, bias=False).bfloat16())
    x = torch.randn(3, 16).bfloat16()
    before = model(x)
    with torch.no_grad(), exact_top_logits(model, 8) as applies:
        inside = model(x)
    assert applies and inside.dtype == torch.float32 and before.dtype == torch.bfloat16
    assert torch.equal(inside.argmax(-1), _reference(x, model.lm_head.weight).argmax(-1))
    assert torch.equal(model(x), before)  # the hook is gone
    fp32 = _Head(nn.Linear(16, 100, bias=False))
    with torch.no_grad(), exact_top_logits(fp32, 8):
        assert torch.equal(fp32(x.float()), x.float() @ fp32.lm_head.weight.T)  # float32 passes untouched
    with exact_top_logits(model, 0) as applies:
        assert not applies and model(x).dtype == torch.bfloat16


def test_no_refinement_where_the_weight_alone_does_not_give_the_product():
    class Adapted(nn.Module):  # a LoRA-style layer: its product is more than its base weight's
        def __init__(self) -> None:
            super().__init__()
            self.base_layer = nn.Linear(4, 6)

    holder = _Head(nn.Linear(4, 6))
    holder.lm_head = Adapted()
    assert output_weight(holder) is None
    with exact_top_logits(holder) as applies:
        assert not applies
    assert output_weight(nn.Linear(3, 3)) is None  # not a causal LM


def _float32_head_engine(model: nn.Module, tokenizer) -> TransformersEngine:
    """An engine whose output projection returns the float32 products of the bf16 operands (the reference)."""
    head = model.get_output_embeddings()
    if isinstance(head, PrepackedLinear):  # the packed layer's own weight, or the tied input embeddings
        weight = head.dense if head.dense is not None else model.get_input_embeddings().weight
    else:
        weight = head.weight
    handle = head.register_forward_hook(lambda m, args, out: _reference(args[0], weight))
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[], exact_top_logits=0)
    engine.handle = handle
    return engine


@pytest.mark.parametrize("prepack", [False, True])
@pytest.mark.parametrize("tied", [True, False])
def test_greedy_generation_from_a_bf16_copy_follows_the_float32_argmax(tmp_path, tied, prepack):
    if prepack and not prepacking_supported(torch.bfloat16, "cpu"):
        pytest.skip("no oneDNN bfloat16 kernels")
    from grove.models.tiny import create_tiny_model_dir

    path = create_tiny_model_dir(tmp_path / "m", tie_word_embeddings=tied, initializer_range=0.2, hidden_size=128)
    policy, tokenizer = load_policy(str(path))
    copy = GenerationWeights(policy, torch.bfloat16, prepack=prepack)
    if prepack:
        assert isinstance(copy.model.lm_head, PrepackedLinear)
        assert (copy.model.lm_head.dense is not None) == (not tied)  # an untied head keeps its dense weight
    prompts = [[7, 8, 9, 10], [11, 12], [40, 41, 42, 43, 44]]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=16)
    refined = TransformersEngine(copy.model, tokenizer, eos_token_ids=[]).generate(
        prompts, 1, greedy, torch.Generator().manual_seed(0)
    )
    reference_engine = _float32_head_engine(copy.model, tokenizer)
    reference = reference_engine.generate(prompts, 1, greedy, torch.Generator().manual_seed(0))
    reference_engine.handle.remove()
    assert torch.equal(refined.response_ids, reference.response_ids)
    assert torch.allclose(refined.logprobs, reference.logprobs, atol=1e-4)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    drawn = TransformersEngine(copy.model, tokenizer, eos_token_ids=[]).generate(
        prompts, 2, sampling, torch.Generator().manual_seed(5)
    )
    assert torch.isfinite(drawn.logprobs[drawn.response_mask.bool()]).all()
    copy.release()
    copy.refresh(policy)  # a refreshed copy (the dense head weight too) generates the same
    again = TransformersEngine(copy.model, tokenizer, eos_token_ids=[]).generate(
        prompts, 1, greedy, torch.Generator().manual_seed(0)
    )
    assert torch.equal(again.response_ids, refined.response_ids)
