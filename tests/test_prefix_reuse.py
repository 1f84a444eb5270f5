"""Prefix reuse in the engine (grove.rollout.prefix_cache): a prompt that starts with tokens whose keys and values
are cached (the prefix a batch shares, or a row of the previous call inside ``reusing_prefixes``) samples the
same tokens with the same log-probs as a full prefill, and runs fewer tokens through the model."""

from __future__ import annotations

import pytest
import torch

from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine
from grove.rollout.prefix_cache import (
    MIN_REUSED_TOKENS,
    KVBank,
    assemble_prefixes,
    compact_rows,
    longest_common_prefix,
    shared_batch_prefix,
)


def _prompts(vocab: int, shared: int, tails: list[int], seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    head = torch.randint(5, vocab, (shared,), generator=g).tolist()
    return [head + torch.randint(5, vocab, (t,), generator=g).tolist() for t in tails]


@pytest.fixture
def counting():
    """``counting(model)``: the list of tokens each forward of ``model`` runs (a pre-hook, removed afterwards)."""
    handles = []

    def attach(model) -> list[int]:
        seen: list[int] = []
        hook = lambda _m, _a, kw: seen.append(int(kw["input_ids"].numel()))  # noqa: E731
        handles.append(model.register_forward_pre_hook(hook, with_kwargs=True))
        return seen

    yield attach
    for handle in handles:
        handle.remove()


def _generate(model, tokenizer, prompts, *, reuse, n=2, seed=3, temperature=1.0, tokens=6):
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[], reuse_prefixes=reuse)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=tokens)
    return engine.generate(prompts, n, sampling, torch.Generator().manual_seed(seed))


def test_shared_batch_prefix_is_prefilled_once_and_samples_the_same(policy, counting):
    model, tokenizer = policy
    prompts = _prompts(model.config.vocab_size, 40, [3, 9, 1, 5])
    seen = counting(model)
    ours = _generate(model, tokenizer, prompts, reuse=True)
    prefills = list(seen[:2])
    seen.clear()
    full = _generate(model, tokenizer, prompts, reuse=False)
    # the shared 40 tokens once as one row, then each prompt's tail right-aligned (widest tail 9)
    assert prefills == [40, 4 * 9] and seen[0] == 4 * 49
    assert ours.prompt_tokens_reused == 3 * 40 and full.prompt_tokens_reused == 0  # 40 shared tokens run once
    assert torch.equal(ours.response_ids, full.response_ids)
    torch.testing.assert_close(ours.logprobs, full.logprobs, atol=1e-5, rtol=1e-5)
    assert torch.equal(ours.prompt_ids, full.prompt_ids) and torch.equal(ours.prompt_mask, full.prompt_mask)


def test_short_shared_prefix_is_not_split_off(policy, counting):
    model, tokenizer = policy
    prompts = _prompts(model.config.vocab_size, MIN_REUSED_TOKENS - 1, [4, 6])
    seen = counting(model)
    _generate(model, tokenizer, prompts, reuse=True)
    assert seen[0] == 2 * (MIN_REUSED_TOKENS - 1 + 6)


def test_next_call_reuses_the_previous_rows_like_a_conversation(policy, counting):
    """Turn 2's contexts extend turn 1's rows (prompt + sampled tokens + new environment tokens): only the
    tokens the cache does not hold are run, and the samples equal a full prefill's."""
    model, tokenizer = policy
    vocab = model.config.vocab_size
    first = _prompts(vocab, 0, [20, 25, 30], seed=1)
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[], reuse_prefixes=True)
    plain = TransformersEngine(model, tokenizer, eos_token_ids=[], reuse_prefixes=False)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=5)
    seen = counting(model)
    with engine.reusing_prefixes():
        turn1 = engine.generate(first, 1, sampling, torch.Generator().manual_seed(0))
        replies = _prompts(vocab, 0, [4, 7, 2], seed=2)
        second = [p + r[:5] + e for p, r, e in zip(first, turn1.response_ids.tolist(), replies, strict=True)]
        seen.clear()
        turn2 = engine.generate(second, 1, sampling, torch.Generator().manual_seed(1))
        reused_prefill = seen[0]
    seen.clear()
    reference = plain.generate(second, 1, sampling, torch.Generator().manual_seed(1))
    # cached: prompt + the first 4 sampled tokens (the 5th was never run); run: the 5th + the reply (widest 8)
    assert reused_prefill == 3 * (1 + 7) and seen[0] == 3 * max(len(s) for s in second)
    assert turn2.prompt_tokens_reused == sum(len(s) for s in second) - sum(1 + len(r) for r in replies)
    assert torch.equal(turn2.response_ids, reference.response_ids)
    torch.testing.assert_close(turn2.logprobs, reference.logprobs, atol=1e-5, rtol=1e-5)
    assert engine.prefixes.bank is None and not engine.prefixes.open  # nothing outlives the context


def test_rows_that_finish_early_are_kept_too(policy):
    """Rows leave the cache when they end (eos); inside reusing_prefixes they are kept at that moment."""
    model, tokenizer = policy
    prompts = _prompts(model.config.vocab_size, 0, [12, 18, 24, 30], seed=4)
    eos = list(range(model.config.vocab_size // 2))  # half the vocabulary ends a completion: rows end at once
    engine = TransformersEngine(model, tokenizer, eos_token_ids=eos, reuse_prefixes=True)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=8)
    with engine.reusing_prefixes():
        out = engine.generate(prompts, 1, sampling, torch.Generator().manual_seed(0))
        bank = engine.prefixes.bank
        lengths = out.response_mask.sum(1)
        assert len(set(lengths.tolist())) > 1  # rows ended at different steps
        expected = sorted(len(p) + int(n) - 1 for p, n in zip(prompts, lengths.tolist(), strict=True))
        assert sorted(bank.lengths.tolist()) == expected
        for r in range(bank.rows):
            row = bank.tokens[r, : int(bank.lengths[r])].tolist()
            i = next(i for i, p in enumerate(prompts) if row[: len(p)] == p)
            assert row[len(prompts[i]) :] == out.response_ids[i, : int(lengths[i]) - 1].tolist()


def test_reuse_off_keeps_nothing(policy):
    model, tokenizer = policy
    engine = TransformersEngine(model, tokenizer, eos_token_ids=[], reuse_prefixes=False)
    with engine.reusing_prefixes():
        engine.generate([[5, 6, 7]], 1, SamplingParams(max_new_tokens=2), torch.Generator().manual_seed(0))
        assert engine.prefixes.bank is None


def test_bank_helpers_against_hand_values():
    keys = [torch.arange(2 * 1 * 5 * 2, dtype=torch.float32).reshape(2, 1, 5, 2)]
    mask = torch.tensor([[0, 1, 1, 0, 1], [1, 1, 1, 1, 1]])
    tokens = torch.tensor([[0, 7, 8, 0, 9], [1, 2, 3, 4, 5]])
    bank = compact_rows(keys, keys, mask, tokens)
    assert bank.lengths.tolist() == [3, 5]
    assert bank.tokens.tolist() == [[7, 8, 9, -1, -1], [1, 2, 3, 4, 5]]
    assert bank.columns[0, :3].tolist() == [1, 2, 4] and bank.keys[0] is keys[0]  # read in place, not compacted
    prompts = torch.tensor([[7, 8, 9, 4, -2], [1, 2, 3, 4, 5], [7, 8, -2, -2, -2]])
    lengths, rows = longest_common_prefix(prompts, torch.tensor([4, 5, 2]), bank)
    assert lengths.tolist() == [3, 4, 1] and rows.tolist() == [0, 1, 0]  # never the whole prompt
    assert shared_batch_prefix(torch.tensor([[1, 2, 3, -2], [1, 2, 4, 5]]), torch.tensor([3, 4])) == 2
    layers, prefix_mask = assemble_prefixes(bank, torch.tensor([1, 0]), torch.tensor([3, 1]))
    assert prefix_mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert torch.equal(layers[0][0][0, 0], keys[0][1, 0, :3])  # row 1's first three positions
    assert torch.equal(layers[0][0][1, 0, 2], keys[0][0, 0, 1])  # row 0's first real position, right-aligned
    both = KVBank.concat([bank, compact_rows(keys, keys, torch.ones(2, 5, dtype=torch.long), tokens)])
    assert both.rows == 4 and both.tokens.shape == (4, 5)


@pytest.mark.parametrize("mode", ["per_step", "conversation"])
def test_episodes_with_reuse_equal_episodes_without(policy, counting, mode):
    """run_episodes opens reusing_prefixes over its turns: the same trajectories (fp32), fewer prefilled tokens."""
    from tests.agent_envs import corridor

    from grove.envs.actions import ParsedAction
    from grove.experience.conversation import ConversationPrompter
    from grove.experience.episode_metrics import rollout_timing
    from grove.experience.episodes import EpisodeSettings, run_episodes
    from grove.experience.per_step_prompts import PerStepPrompter

    model, tokenizer = policy
    suite = corridor({"length": 3})
    seen = counting(model)

    def play(reuse: bool):
        if mode == "conversation":
            prompter = lambda: ConversationPrompter(  # noqa: E731
                tokenizer, suite.instructions, show_admissible=True, max_context_tokens=4096, max_new_tokens=6)
        else:
            prompter = lambda: PerStepPrompter(  # noqa: E731
                tokenizer, suite.instructions, history=2, show_admissible=True, max_turns=4)
        seen.clear()
        settings = EpisodeSettings(
            make_env=suite.make,
            make_prompter=prompter,
            parse=lambda text, _obs: ParsedAction(text.strip(), True),
            sampling=SamplingParams(temperature=1.0, max_new_tokens=6),
            max_turns=4,
            invalid_penalty=0.5,
        )
        run = run_episodes(
            TransformersEngine(model, tokenizer, reuse_prefixes=reuse), settings, [(0, 7), (1, 8)], group_size=3,
            generator=torch.Generator().manual_seed(0),
        )
        return run, sum(seen)

    reused, reused_tokens = play(True)
    whole, whole_tokens = play(False)
    assert 0 < reused.prompt_tokens_reused < reused.prompt_tokens == whole.prompt_tokens
    assert whole.prompt_tokens_reused < reused.prompt_tokens_reused  # identical turn-0 prompts only
    fraction = rollout_timing([reused])["prompt_tokens_reused_fraction"]
    assert fraction == reused.prompt_tokens_reused / reused.prompt_tokens
    turns = [[t.action_ids for t in traj.turns] for traj in whole.trajectories]
    assert turns == [[t.action_ids for t in traj.turns] for traj in reused.trajectories]
    assert max(len(t) for t in turns) > 1  # several turns were played
    for a, b in zip(reused.trajectories, whole.trajectories, strict=True):
        for ta, tb in zip(a.turns, b.turns, strict=True):
            torch.testing.assert_close(torch.tensor(ta.logprobs), torch.tensor(tb.logprobs), atol=1e-5, rtol=1e-5)
    assert reused_tokens < whole_tokens
