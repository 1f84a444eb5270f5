"""GiGPO's step-credit diagnostics and the start-state option, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from grove.core.advantages.gigpo import GiGPOParams, gigpo, step_advantages
from grove.core.advantages.step_credit_diagnostics import step_credit_diagnostics
from grove.envs.actions import ParsedAction
from grove.experience.step_annotators import action_id
from grove.step_table import StepTable
from test_advantages_gigpo import Traj, make_agent_batch


def _table(anchor, index, action=None, group=None) -> StepTable:
    n = len(anchor)
    return StepTable(
        sample=torch.arange(n), group=torch.tensor(group or [0] * n), trajectory=torch.arange(n),
        index=torch.tensor(index), anchor=torch.tensor(anchor), reward=torch.zeros(n), penalty=torch.zeros(n),
        terminal=torch.ones(n, dtype=torch.bool),
        columns={} if action is None else {"action": torch.tensor(action)},
    )


def test_diagnostics_by_hand():
    # anchor groups: {0,1} same action, {2,3,4} two actions, {5} alone
    steps = _table([7, 7, 9, 9, 9, 11], [0, 0, 1, 1, 2, 5], action=[3, 3, 1, 2, 1, 4])
    a_episode = torch.tensor([1.0, -1.0, 0.5, 0.5, -1.0, 2.0], dtype=torch.float64)
    a_step = torch.tensor([0.5, -0.5, 1.0, 0.0, -1.0, 0.0], dtype=torch.float64)
    combined = a_episode + a_step
    d = step_credit_diagnostics(steps, a_episode, a_step, combined)
    assert d["anchor_distinct_actions_frac"] == pytest.approx(0.5)
    x, y = torch.tensor([0.5, -0.5, 1.0, -1.0]), torch.tensor([1.0, -1.0, 0.5, -1.0])
    xc, yc = x - x.mean(), y - y.mean()
    assert d["step_episode_corr"] == pytest.approx(float((xc * yc).sum() / (xc.norm() * yc.norm())))
    assert d["advantage_rms_turn/0"] == pytest.approx(math.sqrt((1.5**2 + 1.5**2) / 2))
    assert d["advantage_rms_turn/1"] == pytest.approx(math.sqrt((1.5**2 + 0.5**2) / 2))
    assert d["advantage_rms_turn/2"] == pytest.approx(2.0)
    assert d["advantage_rms_turn/4+"] == pytest.approx(2.0) and "advantage_rms_turn/3" not in d


def test_no_recurring_state_and_no_action_column():
    steps = _table([1, 2, 3], [0, 1, 2])
    zeros = torch.zeros(3, dtype=torch.float64)
    d = step_credit_diagnostics(steps, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), zeros, zeros)
    assert math.isnan(d["step_episode_corr"]) and "anchor_distinct_actions_frac" not in d
    d = step_credit_diagnostics(_table([1, 2], [0, 1], action=[0, 0]), zeros[:2], zeros[:2], zeros[:2])
    assert math.isnan(d["anchor_distinct_actions_frac"])  # no state recurred


def test_action_ids_are_stable_and_ignore_case_and_spaces():
    class Turned:
        def __init__(self, action, valid=True):
            self.parsed = ParsedAction(action, valid)

    import zlib

    assert action_id(Turned("Go North ")) == zlib.crc32(b"go north") & 0x7FFFFFFF
    assert action_id(Turned("go north")) == action_id(Turned(" GO NORTH"))
    assert action_id(Turned("go north")) != action_id(Turned("go south"))
    assert action_id(Turned(None, valid=False)) == -1 and action_id(Turned("go north")) >= 0


def test_an_excluded_start_state_gives_first_steps_no_step_credit():
    # two trajectories of one env group from the same start state (anchor 0), then the same second state (anchor 1)
    trajs = [Traj(0, [0, 1], [0.0, 1.0]), Traj(0, [0, 1], [0.0, 0.0])]
    batch, _ = make_agent_batch(trajs)
    steps = batch.steps
    shared = step_advantages(steps, gamma=0.5)
    excluded = step_advantages(steps, gamma=0.5, start_state="excluded")
    first = steps.index == 0
    assert bool((shared[first] != 0).all()) and bool((excluded[first] == 0).all())
    torch.testing.assert_close(excluded[~first], shared[~first])  # later anchor groups unchanged
    out = gigpo(batch, torch.zeros(batch.num_samples), GiGPOParams(start_state="excluded"))
    assert out.stats["step_nonzero_frac"] == pytest.approx(0.5)
    assert set(out.stats) >= {"step_episode_corr", "advantage_rms_turn/0", "advantage_rms_turn/1"}


def test_the_scale_matched_control_has_the_episode_terms_rms_and_gigpos_direction():
    trajs = [Traj(0, [0, 1, 2], [0.0, 0.0, 1.0]), Traj(0, [0, 1], [0.0, 1.0]), Traj(0, [0, 3, 3, 1], [0.0] * 4),
             Traj(1, [5, 6], [0.0, 1.0]), Traj(1, [5, 5], [0.0, 0.0])]
    batch, where = make_agent_batch(trajs)
    scores = torch.zeros(batch.num_samples)
    plain = gigpo(batch, scores, GiGPOParams())
    matched = gigpo(batch, scores, GiGPOParams(match_episode_rms=True))
    episode = gigpo(batch, scores, GiGPOParams(step_advantage_weight=0.0))
    per_step = lambda out: torch.stack([out.advantages[r, c] for r, c in where]).double()  # noqa: E731
    rms = lambda x: float(x.square().mean().sqrt())  # noqa: E731
    assert rms(per_step(matched)) == pytest.approx(rms(per_step(episode)), rel=1e-6)
    ratio = per_step(matched) / per_step(plain)
    nonzero = per_step(plain) != 0
    assert torch.allclose(ratio[nonzero], ratio[nonzero][0].expand(int(nonzero.sum())))  # one factor: same direction
    assert rms(per_step(plain)) > rms(per_step(episode))  # the step term adds magnitude the control removes
    scale = ratio[per_step(plain) != 0][0]
    torch.testing.assert_close(matched.step_parts["step"], plain.step_parts["step"] * scale)
