"""Prepacked (oneDNN blocked-layout) linear weights of the bf16 generation copy: same values as plain linear
layers, refreshed and released with the copy, left alone where they do not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grove.models.pretrained import load_policy
from grove.rollout.engine import SamplingParams
from grove.rollout.generation_weights import GenerationWeights
from grove.rollout.hf_engine import TransformersEngine
from grove.rollout.prepacked_linear import PrepackedLinear, prepack_linear_layers, prepacking_supported

needs_onednn_bf16 = pytest.mark.skipif(
    not prepacking_supported(torch.bfloat16, "cpu"), reason="this CPU's oneDNN has no bfloat16 kernels"
)


def test_prepacking_applies_to_fp32_and_bf16_on_cpu_only():
    assert not prepacking_supported(torch.bfloat16, "cuda")
    assert not prepacking_supported(torch.float32, "cuda")
    assert not prepacking_supported(torch.float16, "cpu")
    assert prepacking_supported(torch.float32, "cpu") == torch.backends.mkldnn.is_available()


@needs_onednn_bf16
def test_prepacked_linear_equals_linear_bit_for_bit():
    torch.manual_seed(0)
    for bias in (True, False):
        linear = nn.Linear(96, 40, bias=bias).to(torch.bfloat16)
        packed = PrepackedLinear(linear.weight, linear.bias, "w")
        for shape in ((1, 96), (7, 96), (3, 5, 96)):
            x = torch.randn(shape, dtype=torch.bfloat16)
            with torch.inference_mode():
                assert torch.equal(packed(x), linear(x))
        assert torch.equal(packed.packed.to_dense(), linear.weight)  # the packing keeps every value
    packed.release()
    with pytest.raises(RuntimeError, match="released"):
        packed(torch.randn(1, 96, dtype=torch.bfloat16))


@needs_onednn_bf16
def test_adapter_layers_keep_their_base_linear():
    class Adapter(nn.Module):  # shaped like peft's LoRA layer: the adapter reads base_layer.weight
        def __init__(self):
            super().__init__()
            self.base_layer = nn.Linear(8, 8)
            self.lora_A = nn.ModuleDict({"default": nn.Linear(8, 2, bias=False)})

    model = nn.Sequential(nn.Linear(8, 8), Adapter()).to(torch.bfloat16)
    names = {id(p): n for n, p in model.named_parameters()}
    replaced = prepack_linear_layers(model, names)
    assert [layer.source for layer in replaced] == ["0.weight"]
    assert type(model[1].base_layer) is nn.Linear and type(model[1].lora_A["default"]) is nn.Linear


@needs_onednn_bf16
@pytest.mark.parametrize("tied", [True, False])
def test_prepacked_generation_copy_equals_the_plain_copy(tmp_path, tied):
    """Same logits and the same sampled tokens and log-probs as the plain bf16 copy; after the policy moves,
    a refresh (also after a release) brings the packed weights along."""
    from grove.models.tiny import create_tiny_model_dir

    path = create_tiny_model_dir(tmp_path / "m", tie_word_embeddings=tied, initializer_range=0.2)
    policy, tokenizer = load_policy(str(path))
    plain = GenerationWeights(policy)
    packed = GenerationWeights(policy, prepack=True)
    assert packed.prepacked and not plain.prepacked
    assert isinstance(packed.model.lm_head, PrepackedLinear)
    assert type(packed.model.get_input_embeddings()) is nn.Embedding  # the lookup keeps the dense weight
    ids = torch.randint(5, 300, (3, 11))

    def same_outputs() -> None:
        with torch.inference_mode():
            assert torch.equal(plain.model(input_ids=ids).logits, packed.model(input_ids=ids).logits)
        sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
        outs = [
            TransformersEngine(w.model, tokenizer, eos_token_ids=[]).generate(
                [[7, 8, 9, 10], [11, 12]], 3, sampling, torch.Generator().manual_seed(4)
            )
            for w in (plain, packed)
        ]
        assert torch.equal(outs[0].response_ids, outs[1].response_ids)
        assert torch.equal(outs[0].logprobs, outs[1].logprobs)

    same_outputs()
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.03 * torch.randn_like(p))
    for weights in (plain, packed):
        weights.release()
    assert all(layer.packed is None for layer in packed.prepacked)
    for weights in (plain, packed):
        weights.refresh(policy)
    same_outputs()
    sources = dict(policy.named_parameters())
    for layer in packed.prepacked:
        assert torch.equal(layer.packed.to_dense(), sources[layer.source].detach().to(torch.bfloat16))


@pytest.mark.skipif(not prepacking_supported(torch.float32, "cpu"), reason="no oneDNN")
def test_prepacked_fp32_copy_matches_the_policy_up_to_summation_order(tmp_path):
    """fp32: the same products summed in oneDNN's order, so logits and sampled log-probs equal the policy's to
    float32 rounding (not bit for bit)."""
    from grove.models.tiny import create_tiny_model_dir

    policy, tokenizer = load_policy(str(create_tiny_model_dir(tmp_path / "m", initializer_range=0.2)))
    weights = GenerationWeights(policy, torch.float32, prepack=True)
    assert len(weights.prepacked) == 7 * policy.config.num_hidden_layers + 1
    ids = torch.randint(5, 300, (3, 11))
    with torch.inference_mode():
        torch.testing.assert_close(weights.model(input_ids=ids).logits, policy(input_ids=ids).logits,
                                   rtol=1e-5, atol=1e-5)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12)
    outs = [
        TransformersEngine(model, tokenizer, eos_token_ids=[]).generate(
            [[7, 8, 9, 10], [11, 12]], 3, sampling, torch.Generator().manual_seed(4)
        )
        for model in (policy, weights.model)
    ]
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)
    torch.testing.assert_close(outs[0].logprobs, outs[1].logprobs, rtol=0, atol=1e-5)
