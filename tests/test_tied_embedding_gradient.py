"""The tied embedding's sparse gradient: the same dense .grad as the default backward, only where tied."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grove.models.tied_embedding_gradient import use_sparse_tied_embedding_gradient


def _tiny(tied: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    return LlamaForCausalLM(config)


def _grads(model, micro_batches: int = 3) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    gen = torch.Generator().manual_seed(1)
    for _ in range(micro_batches):  # accumulation, as the update does
        ids = torch.randint(0, 97, (2, 9), generator=gen)
        model(input_ids=ids, labels=ids).loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_tied_embedding_gradient_is_dense_and_equal_to_the_default():
    model = _tiny(tied=True)
    dense = _grads(model)
    assert use_sparse_tied_embedding_gradient(model)
    assert model.get_input_embeddings().sparse
    sparse = _grads(model)
    assert dense.keys() == sparse.keys()
    for name, grad in sparse.items():
        assert grad.layout == torch.strided, name
        torch.testing.assert_close(grad, dense[name], rtol=1e-6, atol=1e-7)
    weight = model.get_input_embeddings().weight
    torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True).step()  # the optimizer takes it as is
    assert torch.isfinite(weight).all()


def test_untied_or_frozen_embeddings_are_left_alone():
    untied = _tiny(tied=False)
    assert not use_sparse_tied_embedding_gradient(untied)
    assert not untied.get_input_embeddings().sparse
    frozen = _tiny(tied=True)
    frozen.get_input_embeddings().weight.requires_grad_(False)
    assert not use_sparse_tied_embedding_gradient(frozen)
    assert not use_sparse_tied_embedding_gradient(torch.nn.Linear(2, 2))


def test_the_trainer_switches_it_on_in_one_process(tmp_path):
    from grove.config import load_config
    from grove.distributed.world import World
    from grove.models.tiny import create_tiny_model_dir
    from grove.training.policy_models import build_policy_models

    path = create_tiny_model_dir(tmp_path / "model", seed=0)
    cfg = load_config("examples/arithmetic.yaml", [f"model.name={path}", f"output_dir={tmp_path}/run"])
    lm = build_policy_models(cfg, World(), None).causal_lm
    tied = lm.get_input_embeddings().weight is lm.get_output_embeddings().weight
    assert lm.get_input_embeddings().sparse == tied
