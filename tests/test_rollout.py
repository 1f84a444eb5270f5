"""The transformers rollout engine: layout, sampling controls, stopping, fan-out, early exit."""

from __future__ import annotations

import pytest
import torch

from grove.rollout.engine import RolloutEngine, SamplingParams, encode_prompts
from grove.rollout.hf_engine import TransformersEngine, filter_logits

PROMPTS = ["What is 2+2?", "Hi", "Solve for x: 2x + 3 = 11. Think step by step."]


@pytest.fixture(scope="module")
def prompt_ids(policy) -> list[list[int]]:
    ids = encode_prompts(policy[1], PROMPTS, system_prompt=None, use_chat_template=True)
    assert len({len(p) for p in ids}) == len(ids)  # different lengths exercise the padding
    return ids


def _engine(policy, eos_token_ids=None) -> TransformersEngine:
    model, tok = policy
    return TransformersEngine(model, tok, eos_token_ids)


def _gen(engine, prompts, n, seed=0, **sampling):
    return engine.generate(prompts, n, SamplingParams(**sampling), torch.Generator().manual_seed(seed))


def _many_eos(policy) -> list[int]:
    """A large set of 'eos' ids so completions end at varied lengths."""
    return list(range(3, len(policy[1]), 3))


def test_engine_satisfies_protocol(policy) -> None:
    assert isinstance(_engine(policy), RolloutEngine)


def test_layout_and_prompt_major_order(policy, prompt_ids) -> None:
    n = 4
    out = _gen(_engine(policy, _many_eos(policy)), prompt_ids, n, temperature=1.0, max_new_tokens=12)
    m, p = len(prompt_ids) * n, max(len(x) for x in prompt_ids)
    r = out.response_ids.shape[1]
    assert out.prompt_ids.shape == out.prompt_mask.shape == (m, p)
    assert out.response_ids.shape == out.response_mask.shape == out.logprobs.shape == (m, r)
    assert r == int(out.response_mask.sum(1).max()) <= 12
    assert out.prompt_index.tolist() == [i for i in range(len(prompt_ids)) for _ in range(n)]
    assert len(out.finish_reasons) == len(out.texts) == m
    pad = policy[1].pad_token_id
    for row in range(m):
        ids = prompt_ids[row // n]
        length = len(ids)
        assert out.prompt_ids[row, p - length :].tolist() == ids  # left-padded
        assert out.prompt_mask[row].tolist() == [0] * (p - length) + [1] * length
        assert (out.prompt_ids[row, : p - length] == pad).all()
        k = int(out.response_mask[row].sum())
        assert out.response_mask[row].tolist() == [1] * k + [0] * (r - k)  # right-padded
        assert (out.response_ids[row, k:] == pad).all()
        assert (out.logprobs[row, k:] == 0).all() and (out.logprobs[row, :k] < 0).all()
        assert out.texts[row] == policy[1].decode(out.response_ids[row, :k], skip_special_tokens=True)
    assert out.num_generated_tokens == int(out.response_mask.sum())
    assert out.seconds > 0
    assert set(out.finish_reasons) <= {"eos", "length"}
    assert out.response_ids.dtype == torch.long and out.logprobs.dtype == torch.float32


def test_greedy_is_deterministic(policy, prompt_ids) -> None:
    engine = _engine(policy)
    a = _gen(engine, prompt_ids, 3, seed=0, temperature=0.0, max_new_tokens=10)
    b = _gen(engine, prompt_ids, 3, seed=123, temperature=0.0, max_new_tokens=10)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    for i in range(len(prompt_ids)):  # all samples of a prompt are identical
        rows = a.response_ids[i * 3 : i * 3 + 3]
        assert (rows == rows[0]).all()


def test_same_seed_same_samples(policy, prompt_ids) -> None:
    engine = _engine(policy, _many_eos(policy))
    kw = dict(temperature=1.0, max_new_tokens=10, top_p=0.9, top_k=50)
    a, b = _gen(engine, prompt_ids, 4, seed=7, **kw), _gen(engine, prompt_ids, 4, seed=7, **kw)
    c = _gen(engine, prompt_ids, 4, seed=8, **kw)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logprobs, b.logprobs)
    assert a.finish_reasons == b.finish_reasons and a.texts == b.texts
    assert a.response_ids.shape != c.response_ids.shape or not torch.equal(a.response_ids, c.response_ids)
    assert len({tuple(row.tolist()) for row in a.response_ids}) > len(prompt_ids)  # samples differ


def test_eos_handling(policy, prompt_ids) -> None:
    eos = _many_eos(policy)
    out = _gen(_engine(policy, eos), prompt_ids, 6, seed=1, temperature=1.0, max_new_tokens=8)
    eos_set = set(eos)
    assert "eos" in out.finish_reasons and "length" in out.finish_reasons
    for row, reason in enumerate(out.finish_reasons):
        k = int(out.response_mask[row].sum())
        toks = out.response_ids[row, :k].tolist()
        assert not eos_set & set(toks[:-1])  # nothing generated after an eos
        if reason == "eos":
            assert toks[-1] in eos_set and out.logprobs[row, k - 1] < 0  # eos kept, with its log-prob
        else:
            assert reason == "length" and k == 8 and toks[-1] not in eos_set


def test_tokenizer_eos_is_default(policy) -> None:
    assert _engine(policy).eos_token_ids == [policy[1].eos_token_id]


def test_max_new_tokens_gives_length(policy, prompt_ids) -> None:
    out = _gen(_engine(policy, []), prompt_ids, 2, temperature=1.0, max_new_tokens=5)
    assert out.finish_reasons == ["length"] * 6
    assert out.response_mask.sum(1).tolist() == [5] * 6 and out.response_ids.shape[1] == 5
    assert out.truncated.all()


def test_stop_string_truncates(policy, prompt_ids) -> None:
    tok = policy[1]
    engine = _engine(policy, [])
    kw = dict(temperature=1.0, max_new_tokens=40)
    full = _gen(engine, prompt_ids[:1], 1, seed=3, **kw)  # one row: the random stream does not depend on others
    tokens = full.response_ids[0].tolist()
    text = full.texts[0]
    stop = text[15:18]
    assert len(stop) == 3 and stop.strip()
    expected = next(k for k in range(1, len(tokens) + 1) if stop in tok.decode(tokens[:k], skip_special_tokens=True))
    out = _gen(engine, prompt_ids[:1], 1, seed=3, stop=(stop, "\x00never\x00"), **kw)
    assert out.finish_reasons == ["stop"]
    assert out.response_ids[0].tolist() == tokens[:expected]  # up to and including the completing token
    assert stop in out.texts[0] and stop not in tok.decode(tokens[: expected - 1], skip_special_tokens=True)
    assert torch.equal(out.logprobs[0], full.logprobs[0, :expected])


def test_stop_string_in_batch(policy, prompt_ids) -> None:
    tok = policy[1]
    out = _gen(_engine(policy, []), prompt_ids, 4, temperature=1.0, max_new_tokens=30, stop=("e",))
    assert "stop" in out.finish_reasons
    for row, reason in enumerate(out.finish_reasons):
        k = int(out.response_mask[row].sum())
        toks = out.response_ids[row, :k].tolist()
        assert "e" not in tok.decode(toks[:-1], skip_special_tokens=True)
        assert ("e" in out.texts[row]) == (reason == "stop")


def test_top_k_one_equals_greedy(policy, prompt_ids) -> None:
    engine = _engine(policy)
    greedy = _gen(engine, prompt_ids, 2, temperature=0.0, max_new_tokens=10)
    top1 = _gen(engine, prompt_ids, 2, seed=5, temperature=1.0, top_k=1, max_new_tokens=10)
    assert torch.equal(greedy.response_ids, top1.response_ids)
    torch.testing.assert_close(greedy.logprobs, top1.logprobs)


def test_fan_out_equals_separate_prompts(policy, prompt_ids) -> None:
    engine = _engine(policy, _many_eos(policy))
    batched = _gen(engine, prompt_ids, 2, temperature=0.0, max_new_tokens=12)
    for i, ids in enumerate(prompt_ids):
        alone = _gen(engine, [ids], 1, temperature=0.0, max_new_tokens=12)
        k = int(alone.response_mask[0].sum())
        for row in (2 * i, 2 * i + 1):
            assert int(batched.response_mask[row].sum()) == k
            assert batched.response_ids[row, :k].tolist() == alone.response_ids[0, :k].tolist()
            torch.testing.assert_close(batched.logprobs[row, :k], alone.logprobs[0, :k], atol=1e-5, rtol=0)
            assert batched.finish_reasons[row] == alone.finish_reasons[0]


def test_finished_rows_cost_no_work(policy, prompt_ids) -> None:
    model = policy[0]
    rows_per_forward: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        out = _gen(_engine(policy, _many_eos(policy)), prompt_ids, 4, temperature=1.0, max_new_tokens=10)
    finally:
        hook.remove()
    lengths = out.response_mask.sum(1)
    assert rows_per_forward[0] == len(prompt_ids)  # prompts prefilled once, not n times
    decode = rows_per_forward[1:]
    assert decode == sorted(decode, reverse=True) and decode[-1] < decode[0]
    # a row of length L takes part in exactly L - 1 decode forwards
    assert sum(decode) == int(lengths.sum()) - out.num_samples


def test_train_mode_model_is_sampled_in_eval_mode(policy, prompt_ids) -> None:
    model = policy[0]
    engine = _engine(policy, _many_eos(policy))
    expected = _gen(engine, prompt_ids, 2, temperature=0.0, max_new_tokens=6)
    model.activation_checkpointing_enable()
    model.train()
    try:
        got = _gen(engine, prompt_ids, 2, temperature=0.0, max_new_tokens=6)
        assert model.training  # restored
    finally:
        model.activation_checkpointing_disable()
        model.eval()
    assert torch.equal(got.response_ids, expected.response_ids)
    assert not got.logprobs.is_inference() and not got.response_ids.is_inference()


def test_filter_logits() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, 2, 1.0)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.5)).tolist() == [[False, True, True, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.79)).tolist() == [[False, False, True, True]]
    assert torch.isinf(filter_logits(logits, 0, 0.81)).tolist() == [[False, False, False, True]]
    assert not torch.isinf(filter_logits(logits, 0, 1.0)).any()
    shuffled = logits[:, [2, 0, 3, 1]]
    assert torch.isinf(filter_logits(shuffled, 0, 0.79)).tolist() == [[True, False, True, False]]


def test_top_p_samples_only_the_nucleus(policy, prompt_ids) -> None:
    out = _gen(_engine(policy, []), prompt_ids[:1], 64, temperature=1.0, top_p=1e-6, max_new_tokens=1)
    greedy = _gen(_engine(policy, []), prompt_ids[:1], 1, temperature=0.0, max_new_tokens=1)
    assert (out.response_ids[:, 0] == greedy.response_ids[0, 0]).all()


def test_sampling_params_validation() -> None:
    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError):
        SamplingParams(stop=("",))
    assert SamplingParams(temperature=0).greedy


def test_encode_prompts(policy) -> None:
    tok = policy[1]
    [ids] = encode_prompts(tok, ["Hi"], system_prompt=None, use_chat_template=True)
    assert tok.decode(ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    [ids] = encode_prompts(tok, ["Hi"], system_prompt="Be brief.", use_chat_template=True)
    assert tok.decode(ids).startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi")
    conv = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    [ids] = encode_prompts(tok, [conv], system_prompt="ignored", use_chat_template=True)
    assert tok.decode(ids) == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    [ids] = encode_prompts(tok, ["2+2="], system_prompt=None, use_chat_template=False)
    assert tok.decode(ids) == "2+2="
    with pytest.raises(ValueError):
        encode_prompts(tok, [conv], system_prompt=None, use_chat_template=False)


def test_identical_prompts_are_prefilled_once_and_sample_like_a_fan_out(policy, prompt_ids) -> None:
    """Repeated prompts (G environments at turn 0) share one prefill row; the rows they continue are the same
    as asking for n samples of one prompt, draw for draw."""
    engine = _engine(policy, _many_eos(policy))
    prefill_rows = []
    forward = engine.model.forward

    def spy(*args, **kwargs):
        if kwargs["input_ids"].shape[1] > 1:
            prefill_rows.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    engine.model.forward = spy
    try:
        a, b = prompt_ids[0], prompt_ids[2]
        repeated = _gen(engine, [a, b, a, a], 1, seed=3, temperature=1.0, max_new_tokens=10)
        distinct = _gen(engine, [a, b], 1, seed=3, temperature=1.0, max_new_tokens=10)
        fan_out = _gen(engine, [a], 3, seed=5, temperature=1.0, max_new_tokens=10)
        as_copies = _gen(engine, [a, a, a], 1, seed=5, temperature=1.0, max_new_tokens=10)
    finally:
        del engine.model.forward
    assert prefill_rows == [2, 2, 1, 1]
    assert repeated.prompt_tokens_reused == 2 * len(a) and as_copies.prompt_tokens_reused == 2 * len(a)
    assert distinct.prompt_tokens_reused == 0 and fan_out.prompt_tokens_reused == 0  # n samples share by design
    assert torch.equal(as_copies.response_ids, fan_out.response_ids)
    assert torch.equal(as_copies.logprobs, fan_out.logprobs)
    assert repeated.prompt_index.tolist() == [0, 1, 2, 3] and distinct.prompt_index.tolist() == [0, 1]
    width = repeated.prompt_ids.shape[1]
    assert repeated.prompt_ids[2, width - len(a) :].tolist() == a


def test_two_level_inverse_cdf_draws_each_index_with_its_probability() -> None:
    """A vocabulary that is not a multiple of the chunk (the padded path), zero-weight indices in the first
    chunk, in the middle and at the end: frequencies match the weights, zero-weight indices never come up."""
    from grove.rollout.sampling import CHUNK, inverse_cdf_sample

    vocab = 2 * CHUNK + 37
    weights = torch.zeros(vocab)
    hot = {0: 1.0, 5: 3.0, CHUNK - 1: 2.0, CHUNK + 10: 0.5, vocab - 1: 3.5}
    for index, weight in hot.items():
        weights[index] = weight
    rows = 40_000
    uniforms = torch.rand(rows, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    drawn, mass = inverse_cdf_sample(weights.expand(rows, vocab).contiguous(), uniforms)
    assert torch.allclose(mass, torch.full((rows,), 10.0, dtype=torch.float64))
    counts = torch.bincount(drawn, minlength=vocab).double() / rows
    assert set(drawn.unique().tolist()) == set(hot)
    for index, weight in hot.items():
        assert counts[index].item() == pytest.approx(weight / 10.0, abs=0.01)
