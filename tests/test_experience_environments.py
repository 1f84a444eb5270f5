"""Agent training end to end: CLI runs on environments, both prompt modes, evaluation, exact resume,
and token exactness of random-policy rollouts on every built-in environment."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
import torch
from tests.test_experience_episodes import prompter_factory
from tests.test_train_e2e import Crash, metric_rows, run_cli

from grove.envs import build_environment
from grove.envs.actions import ParsedAction
from grove.experience.episodes import EpisodeSettings, run_episodes
from grove.experience.trajectory_batch import trajectories_to_batch
from grove.models.logprob_module import response_logprobs
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine

ENV_BASE = {
    "output_dir": None,
    "model.name": None,
    "threads": 1,
    "env": "{id: 'tests.agent_envs:corridor', params: {length: 3}, max_turns: 4, action_parser: {id: raw}}",
    "rollout.max_new_tokens": 5,
    "rollout.temperature": 1.0,
    "train.steps": 4,
    "train.prompts_per_step": 2,
    "train.completions_per_prompt": 3,
    "train.micro_batch_size": 4,
    "optim.lr": 1e-3,
    "checkpoint.every": 2,
    "eval.max_examples": 3,
    "logging.progress": False,
    "logging.plots": False,  # drawn by the end-to-end test, which looks at them
    "logging.tensorboard": False,
    "algorithm.advantage": "{id: gigpo, gamma: 0.9}",
}


def env_args(model: Path, out: Path, **extra) -> list[str]:
    """``CONFIG --set ...`` for a small corridor run (the config file holds only the seed)."""
    config = out.parent / "agent.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("seed: 0\n")
    values = {**ENV_BASE, "model.name": str(model), "output_dir": str(out), **extra}
    args = [str(config)]
    for k, v in values.items():
        args += ["--set", f"{k}={v}"]
    return args


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.mark.parametrize("prompt", ["per_step", "conversation"])
def test_agent_training_end_to_end(tiny_model, tmp_path, prompt):
    out = tmp_path / "run"
    result = run_cli(["train", *env_args(tiny_model, out, **{"env.prompt": prompt, "logging.plots": True})])
    assert result.exit_code == 0, result.output
    rows = metric_rows(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    required = {
        "success_rate", "episode_return_mean", "turns_per_episode", "invalid_action_rate", "anchor_groups",
        "anchor_group_size_mean", "anchor_steps_in_shared_groups", "advantage/episode_mean", "advantage/step_std",
        "loss_mask_coverage", "environment_errors", "forward_tokens_per_env_step", "samples", "loss", "grad_norm",
    }
    assert required <= set(rows[0]), required - set(rows[0])
    timing = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert {"generation_seconds", "environment_seconds", "environment_steps_per_second"} <= set(timing)
    raw = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"step_seconds"' in x]
    assert len(raw) == 4
    for r in raw:  # the step's phases: building the batch (anchor grouping included) and the advantages are rollout
        assert 0 < r["batch_seconds"] and 0 < r["advantage_seconds"]
        assert r["generation_seconds"] + r["batch_seconds"] + r["advantage_seconds"] < r["rollout_seconds"]
    assert all(r["logprob_mismatch_max"] < 1e-4 for r in rows)
    if prompt == "conversation":
        # environment tokens inside the samples wherever a sample holds several turns (at the context limit a
        # conversation continues in a new sample)
        assert all(r["loss_mask_coverage"] < 1 for r in rows if r["samples_per_episode"] < r["turns_per_episode"])
        assert any(r["loss_mask_coverage"] < 1 for r in rows)
    else:
        assert all(r["loss_mask_coverage"] == 1 for r in rows)
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    turn = samples[0]["trajectory"][0]
    assert {"observation", "anchor", "model_text", "action", "valid", "reward"} <= set(turn)
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 4] and evals[0]["total"] == 3
    assert {"success_rate", "mean_turns", "ci_low", "ci_high"} <= set(evals[0])
    assert (out / "plots/training.png").stat().st_size > 0
    # `grove eval --config` on the environment: success rate with an interval, and mean turns
    ev = run_cli(["eval", "--model", str(out / "checkpoints/step-000004/model"), "--config", *env_args(tiny_model, out)])
    assert ev.exit_code == 0, ev.output
    assert "/3" in ev.output and "CI" in ev.output and "mean_turns" in ev.output


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"env.prompt": "conversation", "algorithm.dynamic_sampling": "{enabled: true, max_rounds: 2}",
         "algorithm.trajectory_weighting": "per_trajectory", "train.mini_batches": 2},
    ],
    ids=["per-step-gigpo", "conversation-dynamic-weighted"],
)
def test_agent_run_killed_mid_step_resumes_to_the_same_metrics(tiny_model, tmp_path, monkeypatch, extra):
    from grove.experience.environment import EnvironmentSource

    full = tmp_path / "full"
    assert run_cli(["train", *env_args(tiny_model, full, **extra)]).exit_code == 0
    crashed = tmp_path / "crashed"
    original = EnvironmentSource.collect

    def crash_in_step_3(self, step):
        if step == 3:
            raise Crash("killed while playing step 3's episodes")
        return original(self, step)

    monkeypatch.setattr(EnvironmentSource, "collect", crash_in_step_3)
    with pytest.raises(Crash):
        run_cli(["train", *env_args(tiny_model, crashed, **extra)])
    monkeypatch.setattr(EnvironmentSource, "collect", original)
    resumed = run_cli(["train", *env_args(tiny_model, crashed, **extra), "--resume", str(crashed)])
    assert resumed.exit_code == 0, resumed.output
    assert metric_rows(crashed) == metric_rows(full)
    summary = [json.loads((d / "summary.json").read_text())["after"] for d in (full, crashed)]
    assert summary[0]["accuracy"] == summary[1]["accuracy"]


def test_config_errors_name_the_field(tmp_path):
    bad = [
        ("env={id: frozenlak}", "env.id"),
        ("env={id: frozenlake, params: {size: 5}}", "env.params"),
        ("algorithm.advantage={id: gigpo}", "environment steps"),
        ("env={id: frozenlake, action_parser: {id: tagg}}", "tag"),
    ]
    for override, expected in bad:
        result = run_cli(["config", "show", "--set", override])
        assert result.exit_code == 2, override
        assert expected in result.output, (override, result.output)


def hashed_admissible(text, observation):
    """A test parser: every answer becomes an admissible action (chosen by a hash of the text), so a random
    policy moves through the environment."""
    actions = observation.admissible_actions or ("look",)
    return ParsedAction(actions[zlib.crc32(text.encode()) % len(actions)], True)


BUILTIN = [
    ("frozenlake", {"size": 4}),
    ("cliffwalking", {}),
    ("taxi", {}),
    ("sokoban", {"dim_room": 6}),
]


@pytest.fixture(scope="module")
def textworld_params(tmp_path_factory):
    return {"challenge": "coin_collector", "num_train_games": 1, "num_eval_games": 1,
            "cache_dir": str(tmp_path_factory.mktemp("tw-cache"))}


@pytest.mark.parametrize("mode", ["per_step", "conversation"])
@pytest.mark.parametrize("env_id", [e for e, _ in BUILTIN] + ["textworld"])
def test_random_policy_rollouts_are_token_exact_on_every_builtin_environment(policy, env_id, mode, request):
    model, tokenizer = policy
    params = dict(BUILTIN)[env_id] if env_id != "textworld" else request.getfixturevalue("textworld_params")
    suite = build_environment(env_id, params)
    settings = EpisodeSettings(
        make_env=suite.make,
        make_prompter=prompter_factory(mode, tokenizer, suite, max_turns=3),
        parse=hashed_admissible,
        sampling=SamplingParams(temperature=1.0, max_new_tokens=5),
        max_turns=3,
        invalid_penalty=0.1,
    )
    run = run_episodes(
        TransformersEngine(model, tokenizer),
        settings,
        [(suite.train_tasks[0], 7)],
        group_size=3,
        generator=torch.Generator().manual_seed(0),
    )
    assert run.errors == 0 and run.environment_steps > 0
    batch, _ = trajectories_to_batch(run.trajectories, 3, pad_token_id=tokenizer.pad_token_id)
    step = 0
    for traj in run.trajectories:
        for turn in traj.turns:
            row = int(batch.steps.sample[step])
            assert batch.response_ids[row, batch.token_steps[row] == step].tolist() == turn.action_ids
            step += 1
    with torch.no_grad():
        logprobs, _ = response_logprobs(model, batch, "packed")
    assert float(((logprobs - batch.old_logprobs).abs() * batch.loss_mask).max()) < 1e-4


@pytest.mark.parametrize(
    "extra",
    [
        {"algorithm.policy_loss": "{id: gspo}", "algorithm.aggregation": "seq_mean_token_mean",
         "algorithm.kl": "{coef: 0.05, estimator: low_var_k3}"},
        {"selection": "{samples: {ratio: 0.75}, tokens: {ratio: 0.5, scope: sequence}}",
         "env.prompt": "conversation", "env.anchor_similarity": 0.8},
        {"algorithm.advantage": "{id: step_discounted_return}", "train.ppo_epochs": 2, "train.mini_batches": 2,
         "train.old_logprobs": "recompute", "algorithm.rollout_correction": "{mode: truncate}"},
        {"algorithm.advantage": "{id: rloo}", "algorithm.kl": "{coef: 0.02, placement: reward}"},
    ],
    ids=["gspo-seqmean-kl", "d3s-conversation-similarity", "step-return-offpolicy-tis", "rloo-kl-in-reward"],
)
def test_agent_experience_composes_with_losses_selection_and_kl(tiny_model, tmp_path, extra):
    out = tmp_path / "run"
    result = run_cli(["train", *env_args(tiny_model, out, **{"train.steps": 2, "checkpoint.every": 2, **extra})])
    assert result.exit_code == 0, result.output
    rows = metric_rows(out)
    assert len(rows) == 2 and all(r["loss"] == r["loss"] for r in rows)  # finite
