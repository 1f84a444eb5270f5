"""The static-cache engine (grove.rollout.static_engine) against the transformers engine: for a fixed seed its samples
and log-probs equal the transformers engine's token for token in fp32 (the same uniform table, the same decoder
arithmetic up to float rounding): single-turn and multi-turn with prefix reuse, end tokens mid-completion, rows
finishing at different steps, stop strings, top-k / top-p, every supported architecture, LoRA, a weight update, a
batch split into passes by the memory budget. On a CPU every step runs eagerly; the CUDA-graph tests run only
where CUDA is."""

from __future__ import annotations

import pytest
import torch

from grove.models.pretrained import load_policy
from grove.models.tiny import create_tiny_model_dir
from grove.rollout.decode_step import StepRunner, bucket_for
from grove.rollout.decoder_spec import DecoderSpec, UnsupportedDecoder
from grove.rollout.engine import RolloutEngine, SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine
from grove.rollout.static_engine import StaticCacheEngine

PROMPTS = ["What is 2+2?", "Hi", "Solve for x: 2x + 3 = 11. Think step by step."]
SAMPLINGS = {
    "plain": {},
    "top_k": {"top_k": 5},
    "top_p_tempered": {"top_p": 0.7, "temperature": 0.8},
    "greedy": {"temperature": 0.0},
}


@pytest.fixture(scope="module")
def prompt_ids(policy) -> list[list[int]]:
    return encode_prompts(policy[1], PROMPTS, system_prompt=None, use_chat_template=True)


def _ends(tokenizer, every: int = 5) -> list[int]:
    """Many end tokens, so completions end at varied steps."""
    return list(range(3, len(tokenizer), every))


def _both(model, tokenizer, prompts, n, sampling, *, eos=None, seed=1, **static):
    """The transformers engine's and the static-cache engine's output for the same call."""
    ours = StaticCacheEngine(model, tokenizer, eos, **static)
    reference = TransformersEngine(model, tokenizer, eos)
    make = lambda: torch.Generator().manual_seed(seed)  # noqa: E731
    return reference.generate(prompts, n, sampling, make()), ours.generate(prompts, n, sampling, make())


def _assert_same(expected, got, atol=2e-5) -> None:
    assert torch.equal(expected.response_ids, got.response_ids)
    assert torch.equal(expected.response_mask, got.response_mask)
    assert expected.finish_reasons == got.finish_reasons
    assert expected.texts == got.texts
    torch.testing.assert_close(expected.logprobs, got.logprobs, atol=atol, rtol=0)
    assert torch.equal(expected.prompt_ids, got.prompt_ids) and torch.equal(expected.prompt_mask, got.prompt_mask)
    assert expected.prompt_tokens_reused == got.prompt_tokens_reused


def test_engine_satisfies_protocol(policy) -> None:
    assert isinstance(StaticCacheEngine(*policy), RolloutEngine)


@pytest.mark.parametrize("name", list(SAMPLINGS))
def test_samples_equal_the_transformers_engine(policy, prompt_ids, name) -> None:
    """Rows ending at different steps (many end tokens), read back every 3 steps (the batch shrinks as they end)."""
    sampling = SamplingParams(max_new_tokens=14, **SAMPLINGS[name])
    expected, got = _both(*policy, prompt_ids, 4, sampling, eos=_ends(policy[1]), sync_every=3)
    lengths = expected.response_mask.sum(1)
    assert "eos" in expected.finish_reasons and len(set(lengths.tolist())) > 1
    _assert_same(expected, got)


def test_samples_equal_without_end_tokens(policy, prompt_ids) -> None:
    expected, got = _both(*policy, prompt_ids, 3, SamplingParams(max_new_tokens=9), eos=[])
    assert set(expected.finish_reasons) == {"length"}
    _assert_same(expected, got)


@pytest.mark.parametrize("stop", [("e",), ("th", "an"), (" ",)])
def test_stop_strings_cut_where_the_transformers_engine_cuts(policy, prompt_ids, stop) -> None:
    """Stop strings are checked when the rows are read back (every 5 steps), for every token since the last check,
    and cut after the token that completed one; a row ending with an end token at that step is not checked."""
    sampling = SamplingParams(max_new_tokens=16, stop=stop)
    expected, got = _both(*policy, prompt_ids, 4, sampling, eos=_ends(policy[1]), seed=2, sync_every=5)
    assert "stop" in expected.finish_reasons
    _assert_same(expected, got)


def test_a_finished_batch_stops_early_and_shrinks(policy, prompt_ids, monkeypatch) -> None:
    """Finished rows move out of the stepped batch when a smaller bucket holds the running ones, and the loop ends
    once every row has ended."""
    sizes: list[int] = []
    run = StepRunner.run
    monkeypatch.setattr(StepRunner, "run", lambda self, count: (sizes.append(count), run(self, count))[1])
    engine = StaticCacheEngine(*policy, _ends(policy[1], 3), sync_every=2)
    out = engine.generate(prompt_ids, 8, SamplingParams(max_new_tokens=30), torch.Generator().manual_seed(0))
    longest = int(out.response_mask.sum(1).max())
    assert sizes[0] == bucket_for(24) and sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0]
    assert longest < 30 and len(sizes) <= longest + 1  # no step after the read-back that saw every row ended


def test_bucket_sizes() -> None:
    assert [bucket_for(c) for c in (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 64, 65, 1000)] == [
        1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 64, 96, 1024
    ]


def test_identical_prompts_and_a_shared_prefix_are_prefilled_once(policy) -> None:
    """Repeated prompts share one prefill row; the 40 tokens all prompts share run once (as the transformers engine
    does: the same count of reused prompt tokens)."""
    model, tokenizer = policy
    g = torch.Generator().manual_seed(0)
    head = torch.randint(5, model.config.vocab_size, (40,), generator=g).tolist()
    prompts = [head + torch.randint(5, model.config.vocab_size, (k,), generator=g).tolist() for k in (3, 9, 1, 5)]
    prompts.append(prompts[1])
    expected, got = _both(model, tokenizer, prompts, 2, SamplingParams(max_new_tokens=6), eos=[])
    assert got.prompt_tokens_reused == 3 * 40 + len(prompts[1])
    _assert_same(expected, got)


def test_turns_reuse_the_previous_rows_like_the_transformers_engine(policy) -> None:
    """Three turns of a conversation inside reusing_prefixes: each turn's context extends the previous turn's rows
    (prompt, sampled tokens, the environment's reply); the engine reads their keys and values from its static cache,
    reuses as many tokens as the transformers engine and samples what a full prefill samples."""
    model, tokenizer = policy
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    system = torch.randint(5, vocab, (30,), generator=g).tolist()
    first = [system + torch.randint(5, vocab, (k,), generator=g).tolist() for k in (5, 9, 3)]
    sampling = SamplingParams(max_new_tokens=6)
    outputs = {}
    for engine in (TransformersEngine(model, tokenizer, _ends(tokenizer, 9)),
                   StaticCacheEngine(model, tokenizer, _ends(tokenizer, 9), sync_every=2)):
        with engine.reusing_prefixes():
            turn1 = engine.generate(first, 2, sampling, torch.Generator().manual_seed(0))
            second = [first[i // 2] + turn1.response_ids[i, : int(turn1.response_mask[i].sum())].tolist() + [7, 8, 9]
                      for i in range(6)]
            turn2 = engine.generate(second, 1, sampling, torch.Generator().manual_seed(1))
            third = [second[i] + turn2.response_ids[i, : int(turn2.response_mask[i].sum())].tolist() + [11, 12]
                     for i in range(6)]
            turn3 = engine.generate(third, 1, sampling, torch.Generator().manual_seed(2))
        assert engine.prefixes.bank is None and not engine.prefixes.open  # nothing outlives the block
        outputs[type(engine).__name__] = (turn1, turn2, turn3, third)
    for expected, got in zip(outputs["TransformersEngine"][:3], outputs["StaticCacheEngine"][:3], strict=True):
        _assert_same(expected, got)
    turn3, third = outputs["StaticCacheEngine"][2:]
    assert turn3.prompt_tokens_reused > sum(len(p) for p in third) // 2
    full = StaticCacheEngine(model, tokenizer, _ends(tokenizer, 9), reuse_prefixes=False)
    _assert_same_tokens(full.generate(third, 1, sampling, torch.Generator().manual_seed(2)), turn3)


def _assert_same_tokens(expected, got) -> None:
    assert torch.equal(expected.response_ids, got.response_ids) and expected.finish_reasons == got.finish_reasons
    torch.testing.assert_close(expected.logprobs, got.logprobs, atol=2e-5, rtol=0)


@pytest.mark.parametrize("architecture", ["mistral", "qwen2", "qwen3"])
def test_other_architectures_equal_the_transformers_engine(tmp_path, prompt_ids, architecture) -> None:
    """Qwen2's biased q/k/v projections and Qwen3's per-head query/key norms (perturbed away from their
    initial values so that they matter), Mistral's layers."""
    model, tokenizer = load_policy(create_tiny_model_dir(tmp_path / architecture, architecture=architecture,
                                                         initializer_range=0.2))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in model.model.layers:
            attention = layer.self_attn
            for name in ("q_proj", "k_proj", "v_proj"):
                if getattr(attention, name).bias is not None:
                    getattr(attention, name).bias.normal_(0, 0.3, generator=g)
            for name in ("q_norm", "k_norm"):
                if hasattr(attention, name):
                    getattr(attention, name).weight.normal_(1, 0.3, generator=g)
    expected, got = _both(model, tokenizer, prompt_ids, 4, SamplingParams(max_new_tokens=12), eos=_ends(tokenizer, 7),
                          sync_every=3)
    _assert_same(expected, got)


def test_a_lora_policy_decodes_with_its_adapters_merged(policy, prompt_ids) -> None:
    from grove.config.lora_section import LoraSettings
    from grove.models.lora import apply_lora

    model, tokenizer = _fresh_policy(policy)
    lora = apply_lora(model, LoraSettings(r=4, alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    lora.eval()
    expected, got = _both(lora, tokenizer, prompt_ids, 3, SamplingParams(max_new_tokens=10), eos=_ends(tokenizer, 7))
    _assert_same(expected, got, atol=1e-4)


def _fresh_policy(policy):
    """A copy of the tiny policy that a test may change."""
    import copy

    return copy.deepcopy(policy[0]), policy[1]


def test_the_next_call_decodes_with_the_updated_weights(policy, prompt_ids) -> None:
    """The engine's copy is refreshed from the model at every call (in place): after the model's weights change (an
    optimizer step) it samples what a new engine on the changed model samples; inside reusing_prefixes it copies
    them once."""
    model, tokenizer = _fresh_policy(policy)
    engine = StaticCacheEngine(model, tokenizer, [])
    sampling = SamplingParams(max_new_tokens=8)
    before = engine.generate(prompt_ids, 2, sampling, torch.Generator().manual_seed(0))
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(param.numel())) * 0.05)
    after = engine.generate(prompt_ids, 2, sampling, torch.Generator().manual_seed(0))
    reference = TransformersEngine(model, tokenizer, []).generate(prompt_ids, 2, sampling,
                                                                  torch.Generator().manual_seed(0))
    _assert_same(reference, after)
    assert not torch.equal(before.logprobs, after.logprobs)
    refreshes = []
    refresh = engine.weights.refresh
    engine.weights.refresh = lambda m: (refreshes.append(1), refresh(m))
    with engine.reusing_prefixes():
        for _ in range(3):
            engine.generate(prompt_ids, 1, sampling, torch.Generator().manual_seed(0))
    engine.generate(prompt_ids, 1, sampling, torch.Generator().manual_seed(0))
    assert len(refreshes) == 2  # once in the block, once after it


def test_more_rows_than_the_memory_budget_decode_in_passes(policy, prompt_ids, monkeypatch) -> None:
    model, tokenizer = policy
    sampling = SamplingParams(max_new_tokens=10)
    engine = StaticCacheEngine(model, tokenizer, _ends(tokenizer, 7))
    width = max(len(p) for p in prompt_ids) + sampling.max_new_tokens
    per_row = engine.bytes_per_row(width, sampling.max_new_tokens)
    monkeypatch.setattr(engine, "_free_memory", lambda: 5.5 * per_row / engine.cache_memory_fraction)  # 5 rows
    generator = torch.Generator().manual_seed(3)
    got = engine.generate(prompt_ids, 4, sampling, generator)
    assert engine.passes == 3  # 12 rows, 5 a pass
    expected = TransformersEngine(model, tokenizer, _ends(tokenizer, 7)).generate(
        prompt_ids, 4, sampling, torch.Generator().manual_seed(3))
    _assert_same(expected, got)


def test_bfloat16_copy_computes_float32_logits(policy, prompt_ids) -> None:
    """A bf16 copy with exact_top_logits computes the logits in float32 from the bf16 weights (upcast exactly);
    its greedy tokens are the argmax of those logits, recomputed here from the same bf16 tensors."""
    model, tokenizer = policy
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    engine = StaticCacheEngine(model, tokenizer, [], dtype=torch.bfloat16)
    out = engine.generate(prompt_ids, 1, greedy, torch.Generator().manual_seed(0))
    assert engine.weights.head.dtype == torch.bfloat16 and engine.weights.logits_weight.dtype == torch.float32
    assert out.logprobs.dtype == torch.float32 and torch.isfinite(out.logprobs).all()
    # the first token's logits, recomputed from the copy's bf16 tensors with a float32 head
    from grove.rollout.decoder_forward import attention_mask, decoder_forward
    from grove.rollout.prompt_rows import left_pad

    ids, mask = left_pad(prompt_ids, engine.pad_token_id)
    keys, values = engine._empty_cache(len(ids), ids.shape[1])
    logits = decoder_forward(engine.weights, engine.rotary, ids, (mask.cumsum(-1) - 1).clamp(min=0), keys, values,
                             torch.arange(ids.shape[1]),
                             attention_mask(mask.bool(), torch.arange(ids.shape[1]), torch.arange(ids.shape[1])))
    assert logits.dtype == torch.float32 and out.response_ids[:, 0].tolist() == logits.argmax(-1).tolist()
    rounded = StaticCacheEngine(model, tokenizer, [], dtype=torch.bfloat16, exact_top_logits=0)
    rounded.generate(prompt_ids, 1, greedy, torch.Generator().manual_seed(0))
    assert rounded.weights.logits_weight.dtype == torch.bfloat16


def test_unsupported_models_are_named() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64))
    with pytest.raises(UnsupportedDecoder, match="model type 'gpt2'"):
        DecoderSpec.of(gpt2)
    small = dict(num_hidden_layers=1, hidden_size=16, intermediate_size=32, num_attention_heads=2, vocab_size=64)
    dynamic = LlamaForCausalLM(LlamaConfig(**small, rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    with pytest.raises(UnsupportedDecoder, match="'dynamic'"):
        DecoderSpec.of(dynamic)
    gelu = LlamaForCausalLM(LlamaConfig(**small, hidden_act="gelu"))
    with pytest.raises(UnsupportedDecoder, match="gelu"):
        DecoderSpec.of(gelu)


def test_auto_picks_the_static_engine_on_cuda_for_supported_models(policy) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from grove.rollout_engines import engine_choice

    model = policy[0]
    assert engine_choice("auto", model) == ("transformers", None)  # a CPU: the transformers engine
    assert engine_choice("auto", model, torch.device("cuda")) == ("static_cache", None)
    assert engine_choice("transformers", model, torch.device("cuda")) == ("transformers", None)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64))
    name, why = engine_choice("auto", gpt2, torch.device("cuda"))
    assert name == "transformers" and "model type 'gpt2'" in why


def test_decode_step_traces_as_one_graph(policy, prompt_ids) -> None:
    """The decode step has no host read-back and no value-dependent shape (what a CUDA graph needs): dynamo traces
    it whole (``fullgraph``) on the CPU, and the traced step draws what the eager step draws."""
    model, tokenizer = policy
    sampling = SamplingParams(max_new_tokens=6, top_p=0.9)
    engine = StaticCacheEngine(model, tokenizer, _ends(tokenizer, 7), sync_every=100)
    expected = engine.generate(prompt_ids, 2, sampling, torch.Generator().manual_seed(4))
    torch._dynamo.reset()
    for runner in engine._runners.values():
        runner.step.forward = torch.compile(runner.step.forward, fullgraph=True, backend="eager", dynamic=False)
    got = engine.generate(prompt_ids, 2, sampling, torch.Generator().manual_seed(4))
    _assert_same(expected, got)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@cuda
def test_cuda_graph_replays_equal_eager_steps(policy, prompt_ids) -> None:
    model, tokenizer = _fresh_policy(policy)
    model.cuda()
    sampling = SamplingParams(max_new_tokens=24, top_k=20)
    eager = StaticCacheEngine(model, tokenizer, _ends(tokenizer, 7), cuda_graphs=False, sync_every=4)
    graphed = StaticCacheEngine(model, tokenizer, _ends(tokenizer, 7), sync_every=4)
    expected = eager.generate(prompt_ids, 8, sampling, torch.Generator().manual_seed(0))
    got = graphed.generate(prompt_ids, 8, sampling, torch.Generator().manual_seed(0))
    assert graphed.captures >= 2  # the full batch and a smaller bucket
    _assert_same(expected, got, atol=1e-5)


@cuda
def test_cuda_graph_replays_read_the_updated_weights(policy, prompt_ids) -> None:
    model, tokenizer = _fresh_policy(policy)
    model.cuda()
    sampling = SamplingParams(max_new_tokens=12)
    graphed = StaticCacheEngine(model, tokenizer, [], sync_every=4)
    graphed.generate(prompt_ids, 4, sampling, torch.Generator().manual_seed(0))
    captured = graphed.captures
    with torch.no_grad():
        for param in model.parameters():
            param.mul_(1.1)
    got = graphed.generate(prompt_ids, 4, sampling, torch.Generator().manual_seed(0))
    assert graphed.captures == captured  # the same graphs, replayed over the refreshed copy
    expected = StaticCacheEngine(model, tokenizer, [], cuda_graphs=False).generate(
        prompt_ids, 4, sampling, torch.Generator().manual_seed(0))
    _assert_same(expected, got, atol=1e-5)


def _metrics(run) -> list[dict]:
    import json

    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]


SAME_RUN_KEYS = ("reward_mean", "completion_length_mean", "generated_tokens", "loss", "advantage_std")


@pytest.mark.parametrize("kind", ["single_turn", "conversation"])
def test_a_run_with_the_static_engine_equals_one_with_the_transformers_engine(tmp_path, kind) -> None:
    """``rollout.engine: static_cache`` in a training run (fp32, on-policy): the same completions, rewards and losses
    as the transformers engine, step by step, and the same weights at the end; a conversation reuses the previous
    turns' keys and values from the static cache."""
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    from grove.resolve import load_config
    from grove.training.trainer import Trainer

    tests = Path(__file__).resolve().parent
    sys.path.insert(0, str(tests))
    from test_experience_environments import ENV_BASE
    from tiny_runs import settings

    tiny = create_tiny_model_dir(tmp_path / "tiny")
    runs = {}
    for engine in ("transformers", "static_cache"):
        out = tmp_path / engine
        exact = {"rollout.engine": engine, "train.precision": "fp32", "rollout.prepacked_weights": False,
                 "checkpoint.every": 2, "logging.progress": False}
        if kind == "single_turn":
            values = settings(tiny, out, 2, **exact)
        else:
            values = {**ENV_BASE, "model.name": tiny, "output_dir": out, "env.prompt": "conversation",
                      "train.steps": 2, "eval.before_training": False, **exact}
        Trainer(load_config(None, [f"{k}={v}" for k, v in values.items()]), out).run()
        runs[engine] = out
    expected, got = _metrics(runs["transformers"]), _metrics(runs["static_cache"])
    assert len(expected) == len(got) == 2
    for a, b in zip(expected, got, strict=True):
        for key in SAME_RUN_KEYS:
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
        if kind == "conversation":
            assert b["prompt_tokens_reused_fraction"] == pytest.approx(a["prompt_tokens_reused_fraction"])
            assert b["prompt_tokens_reused_fraction"] > 0
    weights = [load_file(next((runs[e] / "checkpoints").glob("*/model/model.safetensors"))) for e in runs]
    for name, value in weights[0].items():
        torch.testing.assert_close(value, weights[1][name], atol=1e-5, rtol=1e-4)
