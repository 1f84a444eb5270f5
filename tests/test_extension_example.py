"""The 'add a component' examples in the docs work verbatim, from YAML, with no trainer edit, each one file: the
estimator and the step-level method of docs/components.md, the estimator and the policy loss of docs/architecture.md,
the environment of docs/environments.md and the reward combiner of docs/multi-objective.md."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from grove.config import ConfigError
from grove.resolve import load_config

DOCS = Path(__file__).parent.parent / "docs"


def example_source(doc: str = "components.md", heading: str = "## Adding a new estimator") -> str:
    section = (DOCS / doc).read_text().split(heading, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_documented_estimator_trains_through_the_cli(tmp_path, monkeypatch):
    (tmp_path / "my_doc_estimators.py").write_text(example_source())
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["imports=[my_doc_estimators]", "algorithm.advantage={id: median_baseline, scale: 2.0}"])
    from grove.registry import ADVANTAGE_ESTIMATORS

    # hand-computed: group 0 scores [1, 0, 0, 1] -> lower median 0 -> (r - 0) / 2; group 1 [3, 5, 4] -> median 4
    from test_advantages_group_norm import make_test_batch

    batch = make_test_batch([0, 0, 0, 0, 1, 1, 1], [2] * 7)
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0, 4.0])
    adv = ADVANTAGE_ESTIMATORS.get("median_baseline")(batch, scores, cfg.algorithm.advantage.validated(ADVANTAGE_ESTIMATORS))
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, 0.0, 0.0, 0.5, -0.5, 0.5, 0.0]))

    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "run"
    args = base_overrides(model, out, **{"train.steps": 1, "imports": "[my_doc_estimators]",
                                         "algorithm.advantage": "{id: median_baseline}"})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_the_architecture_worked_example_trains_through_the_front_door(tmp_path, monkeypatch):
    """docs/architecture.md's estimator, one file: hand values, the front door's checks, a run through the CLI."""
    (tmp_path / "my_range_baseline.py").write_text(
        example_source("architecture.md", "### Worked example: a new estimator in one file")
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from grove.config import read_config
    from grove.resolve import resolve
    from test_advantages_group_norm import make_test_batch

    plan = resolve(read_config(None, ["imports=[my_range_baseline]", "algorithm.advantage={id: range_baseline}"]),
                   preflight_checks=False)
    batch = make_test_batch([0, 0, 0, 0, 1, 1, 1], [2] * 7)
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0, 4.0])
    adv = plan.components.advantage_fn(batch, scores, plan.components.advantage_params)
    # group 0: mean 0.5, range 1 -> ±0.5; group 1: mean 4, range 2 -> (-1, 1, 0) / 2
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, -0.5, -0.5, 0.5, -0.5, 0.5, 0.0]), atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="train.completions_per_prompt: 1 with algorithm.advantage 'range_baseline'"):
        resolve(read_config(None, ["imports=[my_range_baseline]", "algorithm.advantage={id: range_baseline}",
                                   "train.completions_per_prompt=1"]), preflight_checks=False)
    with pytest.raises(ConfigError, match="algorithm.advantage.epsilon"):
        resolve(read_config(None, ["imports=[my_range_baseline]", "algorithm.advantage={id: range_baseline, "
                                   "epsilon: 0.1}"]), preflight_checks=False)

    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, run_cli

    out = tmp_path / "run"
    args = base_overrides(create_tiny_model_dir(tmp_path / "tiny"), out, **{
        "train.steps": 1, "imports": "[my_range_baseline]", "algorithm.advantage": "{id: range_baseline}"})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_unimportable_module_is_a_clear_error():
    try:
        load_config(None, ["imports=[no_such_module_xyz]"])
    except ConfigError as exc:
        assert "imports" in str(exc) and "no_such_module_xyz" in str(exc)
    else:
        raise AssertionError("expected a ConfigError")


def test_documented_policy_loss_matches_hand_values_and_trains_through_the_cli(tmp_path, monkeypatch):
    (tmp_path / "my_doc_losses.py").write_text(example_source("architecture.md", "## Adding a policy loss in one file"))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["imports=[my_doc_losses]", "algorithm.policy_loss={id: entropy_shaped_ppo, kappa: 2.0}"])
    from grove.core.losses import PolicyLossInput
    from grove.registry import POLICY_LOSSES

    loss = POLICY_LOSSES.get("entropy_shaped_ppo")
    params = cfg.algorithm.policy_loss.validated(POLICY_LOSSES)
    # on-policy (ratio 1), alpha 0.4, kappa 2: bonus = min(0.4 H, |A| / 2) = [0.2, 1.0, 0.0, 0.3]
    logp = torch.tensor([[-1.0, -2.0, -0.5, -0.1]], requires_grad=True)
    adv = torch.tensor([[1.0, -2.0, 0.0, 3.0]])
    entropy = torch.tensor([[0.5, 3.0, 1.0, 0.75]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    out = loss(PolicyLossInput(logp, logp.detach(), adv, mask, entropy=entropy), params)
    torch.testing.assert_close(out.token_loss, torch.tensor([[-1.2, 1.0, 0.0, 0.0]]))  # -(A + bonus), 0 off-mask
    torch.testing.assert_close(out.token_stats["entropy_bonus"], torch.tensor([[0.2, 1.0, 0.0, 0.0]]))
    (grad,) = torch.autograd.grad(out.token_loss.sum(), logp)
    torch.testing.assert_close(grad, torch.tensor([[-1.2, 1.0, 0.0, 0.0]]))  # -(A + bonus) * grad(logp)
    # the token with A = 0 has no gradient, as the registration declares (train.skip_zero_advantage may skip it)
    assert POLICY_LOSSES.entry("entropy_shaped_ppo").zero_advantage_rows_skippable
    with pytest.raises(ValueError, match="needs inputs.entropy"):
        loss(PolicyLossInput(logp, logp.detach(), adv, mask), params)

    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    out_dir = tmp_path / "run"
    # a length reward so the random model's completions get non-zero advantages (and so an entropy bonus)
    rewards = "[{id: answer_match, extract: last_number}, {id: 'user_rewards:char_count', weight: 0.1}]"
    args = base_overrides(model, out_dir, **{"train.steps": 1, "imports": "[my_doc_losses]", "rewards": rewards,
                                             "algorithm.policy_loss": "{id: entropy_shaped_ppo, alpha: 0.4}"})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    row = json.loads((out_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 1 and row["entropy_bonus"] > 0  # the loss ran in the update and read the entropy


def test_documented_environment_trains_through_the_cli(tmp_path, monkeypatch):
    """The 'Writing your own environment' example of docs/environments.md, verbatim, by import path."""
    (tmp_path / "my_counter_env.py").write_text(example_source("environments.md", "## Writing your own environment"))
    monkeypatch.syspath_prepend(str(tmp_path))
    from grove.envs import build_environment

    suite = build_environment("my_counter_env:make_suite", {"target": 2})
    env = suite.make()
    assert env.reset(1, 0).anchor == -1
    assert env.step("inc").observation.anchor == 0
    with pytest.raises(ValueError, match="target"):
        build_environment("my_counter_env:make_suite", {"target": 0})

    from grove.models.tiny import create_tiny_model_dir
    from test_experience_environments import env_args
    from test_train_e2e import metric_rows, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    out = tmp_path / "run"
    env = "{id: 'my_counter_env:make_suite', params: {target: 2}, max_turns: 3, action_parser: {id: admissible}}"
    result = run_cli(["train", *env_args(model, out, **{"env": env, "train.steps": 2})])
    assert result.exit_code == 0, result.output
    assert len(metric_rows(out)) == 2


def test_documented_combiner_matches_hand_values_and_trains_through_the_cli(tmp_path, monkeypatch):
    """The 'Adding a reward combiner' example of docs/multi-objective.md, verbatim."""
    (tmp_path / "my_doc_combiners.py").write_text(example_source("multi-objective.md", "## Adding a reward combiner"))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["imports=[my_doc_combiners]", "rewards=[{id: 'user_rewards:two_checks'}]",
                             "algorithm.reward_combination={id: soft_min, temperature: 0.5}"])
    from grove.core.objectives import run_combiner
    from grove.registry import REWARD_COMBINERS
    from test_objectives_combiners import reward_batch

    fn = REWARD_COMBINERS.get("soft_min")
    params = cfg.algorithm.reward_combination.validated(REWARD_COMBINERS)
    batch = reward_batch([[1.0, 0.0], [1.0, 1.0], [float("nan"), 0.5]], [0, 0, 1])
    out = run_combiner(fn, batch, params)
    # -0.5 log(e^-2 + e^0); -0.5 log(2 e^-2) = 1 - 0.5 log 2; one objective applies: its value
    expected = torch.tensor([-0.5 * math.log(math.exp(-2) + 1), 1 - 0.5 * math.log(2), 0.5], dtype=torch.float64)
    torch.testing.assert_close(out.scores, expected)
    torch.testing.assert_close(out.contributions[1], torch.tensor([0.5, 0.5], dtype=torch.float64))

    from grove.models.tiny import create_tiny_model_dir
    from test_train_e2e import base_overrides, metric_rows, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    out_dir = tmp_path / "run"
    args = base_overrides(model, out_dir, **{"train.steps": 1, "imports": "[my_doc_combiners]",
                                             "rewards": "[{id: 'user_rewards:two_checks'}]",
                                             "algorithm.reward_combination": "{id: soft_min, temperature: 0.5}"})
    result = run_cli(["train", "examples/arithmetic.yaml", *args])
    assert result.exit_code == 0, result.output
    assert "objective/has_seven/signal_group_fraction" in metric_rows(out_dir)[0]


def test_documented_step_level_method_matches_hand_values_and_trains_an_agent(tmp_path, monkeypatch):
    """The 'Adding a step-level method' example of docs/components.md, verbatim."""
    (tmp_path / "my_doc_step_methods.py").write_text(example_source("components.md", "## Adding a step-level method"))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(None, ["imports=[my_doc_step_methods]", "env={id: 'tests.agent_envs:corridor'}",
                             "algorithm.advantage={id: anchor_baseline, gamma: 0.5}"])
    from grove.core.advantages import run_estimator
    from grove.registry import ADVANTAGE_ESTIMATORS
    from test_advantages_gigpo import Traj, make_agent_batch

    # one group; both trajectories start in state 0; returns (gamma 0.5): [0.5, 1] and [0, 0]
    # anchor 0 holds 0.5 and 0 (mean 0.25): A = +0.25, -0.25; the other states are alone: 0
    batch, where = make_agent_batch([Traj(0, [0, 1], [0.0, 1.0]), Traj(0, [0, 2], [0.0, 0.0])])
    params = cfg.algorithm.advantage.validated(ADVANTAGE_ESTIMATORS)
    out = run_estimator(ADVANTAGE_ESTIMATORS.get("anchor_baseline"), batch, torch.zeros(4), params)
    got = [float(out.advantages[row, col]) for row, col in where]
    assert got == pytest.approx([0.25, 0.0, -0.25, 0.0])
    with pytest.raises(ConfigError, match="needs environment steps"):
        load_config(None, ["imports=[my_doc_step_methods]", "algorithm.advantage={id: anchor_baseline}"])

    from grove.models.tiny import create_tiny_model_dir
    from test_experience_environments import env_args
    from test_train_e2e import metric_rows, run_cli

    model = create_tiny_model_dir(tmp_path / "tiny")
    out_dir = tmp_path / "run"
    args = env_args(model, out_dir, **{"train.steps": 2, "imports": "[my_doc_step_methods]",
                                       "algorithm.advantage": "{id: anchor_baseline, gamma: 0.9}"})
    result = run_cli(["train", *args])
    assert result.exit_code == 0, result.output
    assert "advantage/step_mean" in metric_rows(out_dir)[0]
