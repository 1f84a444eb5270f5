"""Multi-turn episodes: batched turns, token-exact samples in both prompt modes, isolation of env errors."""

from __future__ import annotations

import pytest
import torch
from tests.agent_envs import corridor

from grove.envs.actions import ParsedAction
from grove.experience.anchors import anchor_ids
from grove.experience.conversation import ConversationPrompter
from grove.experience.episode_records import Turn
from grove.experience.episodes import EpisodeSettings, run_episodes
from grove.experience.per_step_prompts import PerStepPrompter
from grove.experience.trajectory_batch import trajectories_to_batch
from grove.models.logprob_module import response_logprobs
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine


def raw(text, observation):
    word = text.strip()
    return ParsedAction(word, True) if word else ParsedAction(None, False, "empty")


def every_other_invalid():
    calls = {"n": 0}

    def parse(text, observation):
        calls["n"] += 1
        return ParsedAction(None, False, "test") if calls["n"] % 2 == 0 else ParsedAction(text.strip() or "x", True)

    return parse


class CountingEngine:
    """Records how many contexts each turn's generate call gets."""

    def __init__(self, engine):
        self.engine = engine
        self.batch_sizes: list[int] = []
        self.pad_token_id = engine.pad_token_id

    def generate(self, prompts, n, sampling, generator):
        self.batch_sizes.append(len(prompts))
        return self.engine.generate(prompts, n, sampling, generator)


def prompter_factory(mode, tokenizer, suite, max_new_tokens=6, max_turns=5):
    if mode == "conversation":
        return lambda: ConversationPrompter(
            tokenizer, suite.instructions, show_admissible=True, max_context_tokens=4096, max_new_tokens=max_new_tokens
        )
    return lambda: PerStepPrompter(tokenizer, suite.instructions, history=2, show_admissible=True, max_turns=max_turns)


def play(policy, mode, *, parse=raw, groups=3, group_size=3, max_turns=5, fail_at=None, engine=None, seed=0):
    model, tokenizer = policy
    suite = corridor({"length": 3, "fail_at": fail_at})
    engine = engine or TransformersEngine(model, tokenizer)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=6)
    settings = EpisodeSettings(
        make_env=suite.make,
        make_prompter=prompter_factory(mode, tokenizer, suite, max_turns=max_turns),
        parse=parse,
        sampling=sampling,
        max_turns=max_turns,
        invalid_penalty=0.5,
    )
    run = run_episodes(
        engine,
        settings,
        [(task, 1000 + task) for task in range(groups)],
        group_size=group_size,
        generator=torch.Generator().manual_seed(seed),
    )
    return run


@pytest.mark.parametrize("mode", ["per_step", "conversation"])
def test_trained_tokens_are_the_sampled_tokens_and_logprobs_match(policy, mode):
    model, tokenizer = policy
    run = play(policy, mode)
    batch, scores = trajectories_to_batch(run.trajectories, 3, pad_token_id=tokenizer.pad_token_id)
    steps = batch.steps
    assert steps.num_steps == sum(len(t.turns) for t in run.trajectories)
    # every step's tokens in the batch are exactly the ids sampled at that turn
    step = 0
    for traj in run.trajectories:
        for turn in traj.turns:
            row = int(steps.sample[step])
            cols = (batch.token_steps[row] == step).nonzero().flatten()
            assert batch.response_ids[row, cols].tolist() == turn.action_ids
            assert batch.loss_mask[row, cols].all()
            step += 1
    # environment tokens are seen by the forward but never trained on
    assert torch.equal(batch.loss_mask, batch.response_mask & (batch.token_steps >= 0))
    # the rollout log-probs of the sampled tokens equal the training forward's (fp32), in every layout
    for layout in ("padded", "packed", "shared_prefix"):
        with torch.no_grad():
            logprobs, _ = response_logprobs(model, batch, layout)
        diff = ((logprobs - batch.old_logprobs).abs() * batch.loss_mask).max()
        assert diff < 1e-4, (layout, float(diff))
    if mode == "conversation":  # one sample per trajectory unless a prefix break forced a new one
        assert batch.num_samples >= len(run.trajectories)
        assert (batch.response_mask & ~batch.loss_mask).any()  # environment tokens inside the samples
    else:
        assert batch.num_samples == steps.num_steps
        assert torch.equal(steps.sample, torch.arange(batch.num_samples))


def _turn(ids, observation):
    return Turn(observation, list(ids), [-0.5] * len(ids), "", ParsedAction("right", True), 0.0, 0.0, False, "eos")


def _started_conversation(tokenizer):
    """A corridor copy reset to task 0 and a conversation prompter that has seen its first observation."""
    suite = corridor({})
    env = suite.make()
    first = env.reset(0, 0)
    prompter = prompter_factory("conversation", tokenizer, suite)()
    prompter.begin(first)
    return env, first, prompter


def test_conversation_appends_the_separator_and_the_next_message_as_environment_tokens(policy):
    tokenizer = policy[1]
    env, first, prompter = _started_conversation(tokenizer)
    prompt = list(prompter.context())
    eos = tokenizer.eos_token_id
    newline = tokenizer("\n", add_special_tokens=False)["input_ids"]
    action = tokenizer("right", add_special_tokens=False)["input_ids"] + [eos]  # the model stops at <|im_end|>
    second = env.step("right").observation
    prompter.record(_turn(action, first), second)
    context = prompter.context()
    (sample,) = prompter.samples()
    # the context is the old one + the sampled ids + environment ids, and equals the template's rendering
    assert context[: len(prompt) + len(action)] == prompt + action
    env_ids = context[len(prompt) + len(action) :]
    assert env_ids[: len(newline)] == newline  # "<|im_end|>" ends the turn, the template's "\n" follows
    assert sample.response_ids == action + env_ids
    assert sample.token_turns == [0] * len(action) + [-1] * len(env_ids)
    assert sample.logprobs[len(action) :] == [0.0] * len(env_ids)
    rendered = tokenizer.apply_chat_template(prompter.messages, tokenize=False, add_generation_prompt=True)
    assert context == tokenizer(rendered, add_special_tokens=False)["input_ids"]

    # a turn cut by max_new_tokens (no <|im_end|>): the template's <|im_end|> is an environment token
    cut = tokenizer("left", add_special_tokens=False)["input_ids"]
    prompter.record(_turn(cut, second), env.step("left").observation)
    (sample,) = prompter.samples()
    start = len(action) + len(env_ids) + len(cut)
    assert sample.response_ids[start] == eos and sample.token_turns[start] == -1


def test_conversation_starts_a_new_sample_when_the_rendering_would_not_extend_the_tokens(policy):
    tokenizer = policy[1]
    env, first, prompter = _started_conversation(tokenizer)
    canonical = tokenizer("right now", add_special_tokens=False)["input_ids"]
    # the same text, sampled as single characters: a tokenisation the tokenizer would never produce
    odd = [tokenizer(c, add_special_tokens=False)["input_ids"][0] for c in "right now"]
    assert odd != canonical and tokenizer.decode(odd) == "right now"
    prompter.record(_turn(odd + [tokenizer.eos_token_id], first), env.step("right").observation)
    samples = prompter.samples()
    assert prompter.prefix_breaks == 1
    assert len(samples) == 1  # the new sample has no action yet, so only the first one is trained
    assert samples[0].response_ids == odd + [tokenizer.eos_token_id]  # trained ids = sampled ids
    rendered = tokenizer.apply_chat_template(prompter.messages, tokenize=False, add_generation_prompt=True)
    assert prompter.context() == tokenizer(rendered, add_special_tokens=False)["input_ids"]


def test_one_sequence_per_episode_costs_fewer_forward_tokens(policy):
    """Four canonical turns: per-step prompts repeat the instructions and history every turn; the
    conversation holds each token once."""
    _, tokenizer = policy
    suite = corridor({"length": 9})
    action = tokenizer("right", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]

    def forward_tokens(mode):
        env = suite.make()
        obs = env.reset(0, 0)
        prompter = prompter_factory(mode, tokenizer, suite)()
        prompter.begin(obs)
        for k in range(4):
            prompter.context()
            nxt = env.step("right").observation
            prompter.record(_turn(action, obs), nxt if k < 3 else None)
            obs = nxt
        return sum(len(s.prompt_ids) + len(s.response_ids) for s in prompter.samples())

    assert forward_tokens("conversation") < 0.6 * forward_tokens("per_step")


def test_finished_environments_leave_generation(policy):
    model, tokenizer = policy
    engine = CountingEngine(TransformersEngine(model, tokenizer))
    run = play(policy, "per_step", groups=2, group_size=4, max_turns=6, engine=engine)
    running = [sum(len(t.turns) > k for t in run.trajectories) for k in range(len(engine.batch_sizes))]
    assert engine.batch_sizes == running
    assert engine.batch_sizes[0] == 8 and all(a >= b for a, b in zip(engine.batch_sizes, engine.batch_sizes[1:], strict=False))
    for traj in run.trajectories:
        assert len(traj.turns) <= 6
        assert traj.done == (traj.turns[-1].done)
        if traj.won:
            assert traj.turns[-1].reward == 1.0


def test_invalid_actions_do_not_step_the_environment_and_are_penalised(policy):
    run = play(policy, "per_step", parse=every_other_invalid(), groups=2, group_size=2)
    invalid = [(t, k) for t in run.trajectories for k, turn in enumerate(t.turns) if not turn.parsed.valid]
    assert invalid
    for traj, k in invalid:
        turn = traj.turns[k]
        assert turn.penalty == 0.5 and turn.reward == 0.0
        if k + 1 < len(traj.turns):  # the state (and its anchor) did not change
            assert traj.turns[k + 1].observation.anchor == turn.observation.anchor
    batch, scores = trajectories_to_batch(run.trajectories, 2)
    assert float(batch.steps.penalty.sum()) == pytest.approx(0.5 * len(invalid))
    # per-step sample score = episode return − that step's penalty
    returns = batch.rewards[:, 1]
    assert torch.allclose(scores, returns - batch.steps.penalty)


def test_an_environment_that_raises_fails_only_its_trajectory(policy, caplog):
    run = play(policy, "per_step", fail_at=2, groups=4, group_size=3, max_turns=8)
    failed = [t for t in run.trajectories if t.failed]
    assert run.errors == len(failed) > 0
    assert all(t.task_id % 2 == 1 for t in failed)
    assert all("corridor bug" in t.error for t in failed)
    assert any(not t.failed and t.task_id % 2 == 0 and len(t.turns) > 0 for t in run.trajectories)
    batch, _ = trajectories_to_batch(run.trajectories, 3)
    assert batch.steps.terminal.sum() == len(run.trajectories)


def test_anchor_groups_pool_equal_states_of_a_group_only():
    groups = [0, 0, 0, 1, 1, 0]
    keys = [3, 4, 3, 3, 3, (1, 2)]
    assert anchor_ids(groups, keys, [""] * 6) == [0, 1, 0, 2, 2, 3]
    texts = ["the red door", "the red doors", "a blue key", "x", "x", "zzz"]
    # similarity pools the first two texts of group 0 (ratio 0.96), never across groups
    ids = anchor_ids(groups, [1, 2, 3, 4, 5, 6], texts, similarity=0.9)
    assert ids[0] == ids[1] and ids[2] != ids[0] and ids[3] == ids[4] and ids[3] != ids[0]


def test_batch_hierarchy_and_step_table_survive_select_and_concat(policy):
    from grove.batch import concat_batches

    run = play(policy, "conversation", groups=2, group_size=2)
    batch, _ = trajectories_to_batch(run.trajectories, 2)
    rows = torch.tensor([batch.num_samples - 1, 0])
    sub = batch.select(rows)
    assert sub.steps.num_steps == int((batch.steps.sample == rows[0]).sum() + (batch.steps.sample == 0).sum())
    assert torch.equal(sub.steps.sample.unique(), torch.tensor([0, 1]))
    both = concat_batches([batch, sub])
    assert both.steps.num_steps == batch.steps.num_steps + sub.steps.num_steps
    with pytest.raises(ValueError, match="hierarchy"):
        batch.replace(group_index=torch.arange(batch.num_samples) % 2, trajectory_index=torch.zeros_like(batch.group_index))


def test_trajectory_record_keeps_the_step_info_json_can_hold():
    import json
    import math

    from grove.envs.base import Observation
    from grove.experience.episode_records import Trajectory

    turn = _turn([1, 2], Observation("start", anchor=0))
    turn.info = {"step_type": "query", "kb": "tables", "routing_correct": True, "hit": 1, "score": 0.5,
                 "nan": math.nan, "raw": object(), "scores": [1, 2], "gold": None}
    plain = _turn([3], Observation("next", anchor=1))
    record = Trajectory(group=0, slot=0, task_id=7, seed=7, turns=[turn, plain]).record()
    first, second = record["trajectory"]
    assert first["info"] == {"step_type": "query", "kb": "tables", "routing_correct": True, "hit": 1, "score": 0.5,
                             "gold": None}
    assert "info" not in second  # nothing to keep: no key
    json.loads(json.dumps(record, allow_nan=False))
