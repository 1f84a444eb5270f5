"""``train.compile``: decoder layers compiled with torch.compile give eager's numbers (to float rounding),
reach the trainer from the config, and fail with a message naming the field where they cannot run."""

from __future__ import annotations

import pytest
import torch
from tests.test_train_e2e import rows_with_flag_off_and_on
from torch import nn

from grove.config import ConfigError
from grove.distributed.world import World
from grove.models.compiled_layers import CompileUnavailable, compile_decoder_layers, decoder_layers
from grove.models.packed_forward import policy_forward_packed
from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir
from grove.resolve import ModelNeeds, load_config
from grove.training.policy_models import build_policy_models

# one worker runs these tests (make test): inductor's start-up in a process (its C++ header, its checks) is paid once
pytestmark = pytest.mark.xdist_group("compiled_layers")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _tensors(vocab: int, r: int = 7):
    """Two groups of two responses (prompt, prompt mask, responses, response mask), one prompt left-padded."""
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, vocab, (4, 5), generator=g)
    prompt_ids[1] = prompt_ids[0]
    prompt_ids[3] = prompt_ids[2]
    prompt_mask = torch.ones(4, 5, dtype=torch.bool)
    prompt_mask[2:, :2] = False  # left padding
    response_ids = torch.randint(3, vocab, (4, r), generator=g)
    response_mask = torch.arange(r)[None] < torch.tensor([7, 3, 5, 6])[:, None].clamp(max=r)
    return prompt_ids, prompt_mask, response_ids, response_mask


def _logprobs_and_grads(model: nn.Module, tensors) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    prompt_ids, prompt_mask, response_ids, response_mask = tensors
    model.zero_grad(set_to_none=True)
    logprobs, _ = policy_forward_packed(
        model, prompt_ids, prompt_mask, response_ids, response_mask, torch.tensor([0, 0, 1, 1])
    )
    (logprobs * response_mask).sum().backward()
    return logprobs.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_compiled_layers_equal_eager_values_and_gradients(tiny_model):
    model, _ = load_policy(str(tiny_model))
    model.train()  # as the trainer has it (dropout 0): the CLI test below reuses these compiled graphs
    tensors = _tensors(model.config.vocab_size)
    eager_lp, eager_grads = _logprobs_and_grads(model, tensors)
    assert compile_decoder_layers(model) == model.config.num_hidden_layers
    compiled_lp, compiled_grads = _logprobs_and_grads(model, tensors)
    # a shorter batch through the same compiled layers (dynamic shapes) against eager on it
    short = _tensors(model.config.vocab_size, r=4)
    short_lp, _ = _logprobs_and_grads(model, short)
    torch.testing.assert_close(compiled_lp, eager_lp, rtol=1e-5, atol=1e-5)
    assert compiled_grads.keys() == eager_grads.keys()
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    eager_model, _ = load_policy(str(tiny_model))
    torch.testing.assert_close(short_lp, _logprobs_and_grads(eager_model, short)[0], rtol=1e-5, atol=1e-5)
    # the state-dict keys are those of the eager model (checkpoints do not change)
    assert list(model.state_dict()) == list(eager_model.state_dict())


def test_compiled_layers_leave_generation_eager(tiny_model):
    """Generation on the policy itself (no separate copy) runs the compiled layers eagerly: same tokens."""
    from grove.rollout.engine import SamplingParams
    from grove.rollout.hf_engine import TransformersEngine

    model, tokenizer = load_policy(str(tiny_model))
    sampling = SamplingParams(temperature=1.0, max_new_tokens=5)
    eager = TransformersEngine(model, tokenizer).generate([[5, 6, 7], [8, 9]], 2, sampling, torch.Generator().manual_seed(0))
    compile_decoder_layers(model)
    compiled = TransformersEngine(model, tokenizer).generate([[5, 6, 7], [8, 9]], 2, sampling, torch.Generator().manual_seed(0))
    assert torch.equal(eager.response_ids, compiled.response_ids)


def test_train_compile_changes_no_number_beyond_rounding(tiny_model, tmp_path):
    """``train.compile: true`` from the CLI: the same rewards and, to float rounding, the same losses and
    gradient norms as eager training."""
    # the step's 12 samples in one micro-batch: one compiled graph (a micro-batch of one row would compile another)
    rows = rows_with_flag_off_and_on(tiny_model, tmp_path, "train.compile", **{"train.micro_batch_size": 12})
    for eager, compiled in zip(rows[False], rows[True], strict=True):
        assert compiled["loss"] == pytest.approx(eager["loss"], rel=1e-4, abs=1e-6)
        assert compiled["grad_norm"] == pytest.approx(eager["grad_norm"], rel=1e-4)
        assert compiled["reward_mean"] == eager["reward_mean"]


def test_train_compile_without_a_cpp_compiler_names_the_field(tiny_model, tmp_path, monkeypatch):
    import grove.models.compiled_layers as compiled_layers

    monkeypatch.setattr(compiled_layers.shutil, "which", lambda name: None)
    cfg = load_config("examples/arithmetic.yaml", [f"model.name={tiny_model}", f"output_dir={tmp_path}", "train.compile=true"])
    with pytest.raises(ConfigError, match=r"train\.compile.*C\+\+ compiler.*train\.compile: false"):
        build_policy_models(cfg, World(), None, ModelNeeds())


def test_train_compile_with_several_ranks_is_refused(tiny_model, tmp_path, monkeypatch):
    cfg = load_config("examples/arithmetic.yaml", [f"model.name={tiny_model}", f"output_dir={tmp_path}", "train.compile=true"])
    world = World()
    monkeypatch.setattr(type(world), "distributed", property(lambda self: True))
    with pytest.raises(ConfigError, match=r"train\.compile.*several ranks"):
        build_policy_models(cfg, world, None, ModelNeeds())


def test_decoder_layers_of_a_model_without_a_layer_list():
    with pytest.raises(CompileUnavailable, match=r"train\.compile: false"):
        decoder_layers(nn.Linear(2, 2))

