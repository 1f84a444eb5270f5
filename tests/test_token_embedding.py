"""The input embedding whose weight gradient is added into ``.grad`` in place (grove.kernels.token_embedding), and the
training forwards' use of it (grove.models.padded_forward.token_inputs)."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from grove.kernels.output_projection import accumulating_weight_gradient_in_place
from grove.kernels.token_embedding import embed_tokens


@pytest.mark.parametrize("padding_idx", [None, 3])
@pytest.mark.parametrize("grad_exists", [False, True])
def test_embedding_gradient_added_in_place_equals_f_embeddings(padding_idx, grad_exists) -> None:
    """Over two micro-batches with repeated ids (and the padding id), ``weight.grad`` in place equals what autograd
    accumulates through ``F.embedding``; the rows and the other inputs' gradients are unchanged; autograd hands the
    weight no gradient (a tensor hook sees none)."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(20, 6, generator=g).requires_grad_()
    start = torch.randn(20, 6, generator=g)
    batches = [torch.tensor([[1, 3, 3, 7], [7, 7, 0, 3]]), torch.tensor([[19, 3, 1]])]
    outs = [torch.randn(*ids.shape, 6, generator=g) for ids in batches]
    calls = []
    weight.register_hook(lambda grad: calls.append(grad is not None))

    def run(in_place: bool):
        weight.grad, calls[:] = (start.clone() if grad_exists else None), []
        rows = []
        with accumulating_weight_gradient_in_place() if in_place else nullcontext():
            for ids, out in zip(batches, outs, strict=True):
                scale = torch.ones(1, requires_grad=True)
                emb = embed_tokens(weight, ids, padding_idx) if in_place else F.embedding(ids, weight, padding_idx)
                rows.append(emb.detach().clone())
                ((emb * scale) * out).sum().backward()
                rows.append(scale.grad)
        return weight.grad.clone(), rows, list(calls)

    want, want_rows, autograd_calls = run(False)
    got, got_rows, in_place_calls = run(True)
    assert autograd_calls == [True, True] and in_place_calls == [False, False]  # None to the hook
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)  # only the order of the float additions differs
    for a, b in zip(got_rows, want_rows, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    if padding_idx is not None:  # the padding row gets no gradient
        torch.testing.assert_close(got[padding_idx], start[padding_idx] if grad_exists else torch.zeros(6))


def test_embedding_gradient_through_autograd_outside_the_block_and_for_a_non_leaf() -> None:
    weight = torch.randn(10, 4, requires_grad=True)
    ids = torch.tensor([1, 1, 5])
    (want,) = torch.autograd.grad(F.embedding(ids, weight).sum(), weight)
    (got,) = torch.autograd.grad(embed_tokens(weight, ids).sum(), weight)  # no block
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with accumulating_weight_gradient_in_place():
        shared = weight * 1.0  # not a leaf: a cast or a gathered shard
        (got,) = torch.autograd.grad(embed_tokens(shared, ids).sum(), shared)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert weight.grad is None


def test_training_forward_embeds_tokens_itself_only_for_a_plain_embedding(tmp_path) -> None:
    """token_inputs: a plain nn.Embedding is looked up by embed_tokens (the same rows); a subclass (which may scale
    its rows) or an embedding with max_norm keeps the model's own lookup."""
    from grove.models.padded_forward import decoder_backbone, token_inputs
    from grove.models.pretrained import load_policy
    from grove.models.tiny import create_tiny_model_dir

    model, _ = load_policy(create_tiny_model_dir(tmp_path / "tiny"))
    backbone = decoder_backbone(model)
    ids = torch.tensor([[5, 6, 7]])
    inputs = token_inputs(backbone, ids)
    torch.testing.assert_close(inputs["inputs_embeds"], backbone.get_input_embeddings()(ids), atol=0, rtol=0)

    class Scaled(nn.Embedding):
        def forward(self, input_ids):
            return super().forward(input_ids) * 2.0

    original = backbone.get_input_embeddings()
    for replacement in (Scaled(original.num_embeddings, original.embedding_dim),
                        nn.Embedding(original.num_embeddings, original.embedding_dim, max_norm=1.0)):
        backbone.set_input_embeddings(replacement)
        assert token_inputs(backbone, ids) == {"input_ids": ids}


def test_packed_forward_in_place_embedding_gradient_equals_autograds(tmp_path) -> None:
    """On a tiny tied model, one micro-batch of the packed training forward inside the in-place block gives the
    tied weight the gradient autograd gives it outside the block, and every other parameter the same gradient."""
    from grove.models.packed_forward import policy_forward_packed
    from grove.models.pretrained import load_policy
    from grove.models.tiny import create_tiny_model_dir

    model, _ = load_policy(create_tiny_model_dir(tmp_path / "tiny"))
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    prompt_ids = torch.randint(0, vocab, (4, 5), generator=g).repeat_interleave(2, dim=0)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[:2, :2] = 0  # left padding
    response_ids = torch.randint(0, vocab, (8, 6), generator=g)
    response_mask = torch.ones_like(response_ids)
    response_mask[::3, 4:] = 0

    def grads(in_place: bool) -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        with accumulating_weight_gradient_in_place() if in_place else nullcontext():
            lp, _ = policy_forward_packed(model, prompt_ids, prompt_mask, response_ids, response_mask,
                                          torch.arange(8) // 2)
            lp.sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    want, got = grads(False), grads(True)
    assert want.keys() == got.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-5, msg=name)
