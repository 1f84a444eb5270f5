"""Keep-ratio schedules: hand values, monotonicity, clamping, validation, config embedding."""

from __future__ import annotations

import math
import typing

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from grove.core.keep_ratio_schedules import KEEP_RATIO_SCHEDULES, KeepRatioSchedule, ScheduleKind, ratio_at


def test_every_kind_is_registered():
    assert set(KEEP_RATIO_SCHEDULES) == set(typing.get_args(ScheduleKind))


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # steps 0, 5, 10, 15, 19, 20, 100 of a 0.5 -> 1.0 schedule over 20 steps
        ("constant", [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
        ("linear", [0.5, 0.625, 0.75, 0.875, 0.975, 1.0, 1.0]),
        (
            "cosine",
            [
                0.5,
                0.5 + 0.25 * (1 - math.cos(math.pi / 4)),
                0.75,
                0.5 + 0.25 * (1 - math.cos(3 * math.pi / 4)),
                0.5 + 0.25 * (1 - math.cos(19 * math.pi / 20)),
                1.0,
                1.0,
            ],
        ),
        # 4 stages of 5 steps: 0.5, 0.5 + 0.5/3, 0.5 + 1/3, 1.0
        ("step", [0.5, 0.5 + 0.5 / 3, 0.5 + 1 / 3, 1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_hand_values(kind, expected):
    schedule = KeepRatioSchedule(kind=kind, start=0.5, end=1.0, steps=20, stages=4)
    got = [schedule.at(s) for s in (0, 5, 10, 15, 19, 20, 100)]
    assert got == pytest.approx(expected, abs=1e-12)
    assert got == pytest.approx(
        [ratio_at(s, kind=kind, start=0.5, end=1.0, steps=20, stages=4) for s in (0, 5, 10, 15, 19, 20, 100)]
    )
    assert schedule.at(0) == 0.5  # exact endpoints
    assert schedule.at(20) == (0.5 if kind == "constant" else 1.0)


def test_step_stage_boundaries():
    s = KeepRatioSchedule(kind="step", start=0.2, end=0.8, steps=10, stages=3)  # stages of 10/3 steps
    assert [s.at(i) for i in range(12)] == pytest.approx([0.2] * 4 + [0.5] * 3 + [0.8] * 5)
    two = KeepRatioSchedule(kind="step", start=0.25, end=1.0, steps=4, stages=2)
    assert [two.at(i) for i in range(6)] == [0.25, 0.25, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine", "step"])
@pytest.mark.parametrize(("start", "end"), [(0.1, 1.0), (1.0, 0.25), (0.4, 0.4)])
def test_monotone_and_clamped(kind, start, end):
    schedule = KeepRatioSchedule(kind=kind, start=start, end=end, steps=17, stages=5)
    values = [schedule.at(s) for s in range(40)]
    sign = 1 if end >= start else -1
    assert all(sign * (b - a) >= 0 for a, b in zip(values, values[1:], strict=False))
    assert all(min(start, end) <= v <= max(start, end) for v in values)
    assert all(0 < v <= 1 for v in values)
    final = start if kind == "constant" else end
    assert values[17:] == [final] * (40 - 17)


def test_one_step_schedule():
    s = KeepRatioSchedule(kind="linear", start=0.3, end=0.9, steps=1)
    assert (s.at(0), s.at(1), s.at(5)) == (0.3, 0.9, 0.9)


def test_defaults_and_number_shorthand():
    s = KeepRatioSchedule()
    assert (s.kind, s.start, s.end, s.steps, s.stages) == ("cosine", 0.5, 1.0, None, 4)
    assert s.at(10, default_steps=20) == pytest.approx(0.75) and s.at(40, default_steps=20) == 1.0
    with pytest.raises(ValueError, match="default_steps"):
        s.at(3)
    c = KeepRatioSchedule.model_validate(0.75)
    assert (c.kind, c.start, c.end) == ("constant", 0.75, 0.75)
    assert c.at(0) == c.at(1000) == 0.75
    assert KeepRatioSchedule.model_validate(1).at(3) == 1.0
    with pytest.raises(ValidationError):
        KeepRatioSchedule.model_validate(True)
    with pytest.raises(ValidationError, match="start"):
        KeepRatioSchedule.model_validate(1.5)


def test_embeds_in_a_config_model():
    class Samples(BaseModel):
        model_config = ConfigDict(extra="forbid")
        ratio: KeepRatioSchedule = KeepRatioSchedule(kind="constant", start=1.0, end=1.0)

    assert Samples.model_validate({"ratio": 0.5}).ratio.at(7) == 0.5
    cfg = Samples.model_validate({"ratio": {"kind": "linear", "start": 0.5, "end": 1.0, "steps": 10}})
    assert cfg.ratio.at(5) == 0.75
    assert Samples.model_validate(cfg.model_dump()) == cfg  # round-trips
    assert Samples().ratio.at(0) == 1.0


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"start": 0.0}, "start"),
        ({"start": 1.01}, "start"),
        ({"end": -0.5}, "end"),
        ({"end": 2.0}, "end"),
        ({"steps": 0}, "steps"),
        ({"stages": 1}, "stages"),
        ({"kind": "exponential"}, "kind"),
        ({"warmup": 3}, "warmup"),  # extra="forbid"
    ],
)
def test_model_validation_names_the_field(fields, name):
    with pytest.raises(ValidationError, match=name):
        KeepRatioSchedule(**fields)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"start": 0.0}, "start"),
        ({"start": 1.5}, "start"),
        ({"end": 0.0}, "end"),
        ({"steps": 0}, "steps"),
        ({"stages": 1}, "stages"),
        ({"kind": "exp"}, "kind"),
        ({"step": -1}, "step"),
    ],
)
def test_ratio_at_validation_names_the_argument(kwargs, name):
    args = {"step": 0, "kind": "linear", "start": 0.5, "end": 1.0, "steps": 10, "stages": 4} | kwargs
    step = args.pop("step")
    with pytest.raises(ValueError, match=f"^{name} "):
        ratio_at(step, **args)
