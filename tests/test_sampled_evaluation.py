"""Sampled evaluation: pass@k, the interval over items, and ``eval.samples`` on tasks and environments."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from tests.test_experience_environments import ENV_BASE, env_args
from tests.test_train_e2e import run_cli

from grove.config import ConfigError
from grove.evaluation.evaluate import evaluate
from grove.evaluation.stats import (
    PairedDifference,
    SampledReport,
    describe_sampled,
    pass_at_k,
    pass_at_k_levels,
    wilson_interval,
)
from grove.experience import SourceContext, build_experience_source
from grove.models.pretrained import load_policy
from grove.resolve import load_config, resolve
from grove.rewards.scoring import RewardSpec
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine
from grove.tasks.task import Example

# ---------------------------------------------------------------------------------------------- statistics


@pytest.mark.parametrize(("n", "c"), [(1, 0), (1, 1), (4, 0), (4, 1), (5, 2), (6, 6), (8, 3)])
def test_pass_at_k_equals_the_share_of_k_subsets_holding_a_correct_completion(n, c):
    completions = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(completions, k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(4, 1, 5)


def test_pass_at_k_levels():
    assert pass_at_k_levels(1) == [1]
    assert pass_at_k_levels(4) == [1, 2, 4]
    assert pass_at_k_levels(6) == [1, 2, 4, 6]
    assert pass_at_k_levels(8) == [1, 2, 4, 8]


def test_one_sample_per_item_is_the_wilson_interval():
    counts = [1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1]
    r = SampledReport.from_item_counts(counts, 1)
    assert (r.ci_low, r.ci_high) == pytest.approx(wilson_interval(6, 12))
    assert r.accuracy == 0.5 and r.pass_at == {1: 0.5}


def test_items_solved_all_or_nothing_count_as_one_draw_each():
    # every item's 4 samples agree: the 4 copies carry no more information than one, so the interval is Wilson's
    # over the 10 items, not over the 40 samples
    counts = [4, 0, 0, 4, 0, 4, 0, 0, 0, 4]
    r = SampledReport.from_item_counts(counts, 4)
    assert r.accuracy == pytest.approx(0.4)
    assert (r.ci_low, r.ci_high) == pytest.approx(wilson_interval(4, 10))
    assert r.pass_at[4] == pytest.approx(0.4) and r.pass_at[1] == pytest.approx(0.4)


def test_the_design_effect_by_hand():
    counts = [3, 1, 2, 0, 4, 2]  # 6 items, 4 samples each: p = 12 / 24
    r = SampledReport.from_item_counts(counts, 4)
    rates = [c / 4 for c in counts]
    between = sum((x - 0.5) ** 2 for x in rates) / 5 / 6  # variance of the mean of the item rates
    binomial = 0.5 * 0.5 / 24
    effective = 24 * binomial / between
    assert 6 < effective < 24
    z = 1.959963984540054
    center = (0.5 + z * z / (2 * effective)) / (1 + z * z / effective)
    half = z / (1 + z * z / effective) * math.sqrt(0.25 / effective + z * z / (4 * effective**2))
    assert (r.ci_low, r.ci_high) == pytest.approx((center - half, center + half))
    # pass@2 by hand: 1 - C(4 - c, 2) / C(4, 2) per item
    assert r.pass_at[2] == pytest.approx(sum(1 - math.comb(4 - c, 2) / 6 for c in counts) / 6)


def test_uniform_items_use_every_sample_and_the_width_never_passes_the_items_bound():
    even = SampledReport.from_item_counts([2] * 20, 4)  # no variation between items: all 80 samples count
    assert (even.ci_low, even.ci_high) == pytest.approx(wilson_interval(40, 80))
    for counts in ([4, 0, 3, 1, 2, 2], [1, 1, 0, 2, 1, 0, 1]):
        r = SampledReport.from_item_counts(counts, 4)
        p = r.accuracy
        widest = wilson_interval(round(p * len(counts)), len(counts)) if p * len(counts) % 1 == 0 else None
        assert r.ci_low <= p <= r.ci_high
        if widest:
            assert r.ci_high - r.ci_low <= widest[1] - widest[0] + 1e-12


def test_all_correct_or_all_wrong_and_no_items():
    assert SampledReport.from_item_counts([4, 4, 4], 4).ci_high == 1.0
    zero = SampledReport.from_item_counts([0, 0, 0], 4)
    assert zero.ci_low == 0.0 and (zero.ci_low, zero.ci_high) == pytest.approx(wilson_interval(0, 3))
    empty = SampledReport.from_item_counts([], 4)
    assert empty.items == 0 and math.isnan(empty.accuracy) and str(empty) == "n/a (no items)"
    with pytest.raises(ValueError, match="samples"):
        SampledReport.from_item_counts([5], 4)


def test_the_record_and_its_line():
    r = SampledReport.from_item_counts([0, 1, 4, 2, 0, 3], 4)
    record = {**r.record(), "sampled/temperature": 0.7, "accuracy": 0.1}
    assert record["sampled/pass@4"] == pytest.approx(4 / 6) and record["sampled/items"] == 6
    line = describe_sampled(record)
    assert line.startswith("sampled (4 per item, T 0.7): 41.7% (95% CI ") and line.endswith("pass@4 66.7%")
    assert describe_sampled({"accuracy": 0.3}) is None


# ---------------------------------------------------------------------------------------------- tasks


def _digit_reward(prompts, completions, answer, **_):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answer, strict=True)]


def test_task_evaluation_samples_per_example_without_touching_the_greedy_pass(policy):
    model, tokenizer = policy
    engine = TransformersEngine(model, tokenizer)
    examples = [Example(prompt=f"Say a digit {i}", answer=str(i % 10)) for i in range(5)]
    rewards = [RewardSpec(name="digit", fn=_digit_reward, weight=1.0)]
    common = {"max_new_tokens": 6, "batch_size": 4}
    plain = evaluate(engine, tokenizer, examples, rewards, "digit", **common)
    sampling = SamplingParams(temperature=1.5)
    first = evaluate(engine, tokenizer, examples, rewards, "digit", **common, samples=3, sampling=sampling, seed=7)
    again = evaluate(engine, tokenizer, examples, rewards, "digit", **common, samples=3, sampling=sampling, seed=7)
    other = evaluate(engine, tokenizer, examples, rewards, "digit", **common, samples=3, sampling=sampling, seed=8)
    assert first.report == plain.report and first.samples[:5] == plain.samples  # the greedy pass is unchanged
    drawn = [s for s in first.samples if s.get("eval_mode") == "sampled"]
    assert len(drawn) == 15 and [s["prompt"] for s in drawn] == [e.prompt_text for e in examples for _ in range(3)]
    counts = [sum(s["correct"] for s in drawn[3 * i : 3 * i + 3]) for i in range(5)]
    assert first.extra == {**first.extra, **SampledReport.from_item_counts(counts, 3).record()}
    assert first.extra["sampled/temperature"] == 1.5 and first.extra["sampled/samples_per_item"] == 3
    assert again.samples == first.samples  # the seed alone decides the samples
    assert [s["completion"] for s in other.samples[5:]] != [s["completion"] for s in drawn]
    assert len({s["completion"] for s in drawn}) > 1
    with pytest.raises(ValueError, match="temperature above 0"):
        evaluate(engine, tokenizer, examples, rewards, "digit", **common, samples=2, sampling=SamplingParams(temperature=0))


def test_eval_samples_needs_a_temperature():
    with pytest.raises(ConfigError, match=r"eval\.samples.*eval\.temperature"):
        load_config(None, ["eval.samples=4", "rollout.temperature=0"])
    cfg = load_config(None, ["eval.samples=4", "rollout.temperature=0", "eval.temperature=0.8"])
    assert cfg.sampled_eval_temperature == 0.8
    assert load_config(None, ["rollout.temperature=0.6"]).sampled_eval_temperature == 0.6
    with pytest.raises(ConfigError, match="eval.temperature"):
        load_config(None, ["eval.temperature=0"])


# ---------------------------------------------------------------------------------------------- environments


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _env_config(model, out, **extra):
    values = {**ENV_BASE, "model.name": str(model), "output_dir": str(out), **extra}
    return load_config(None, [f"{k}={v}" for k, v in values.items()])


def test_environment_evaluation_plays_sampled_episodes_per_held_out_task(tiny_model, tmp_path):
    model, tokenizer = load_policy(tiny_model)
    engine = TransformersEngine(model, tokenizer)

    def run(**extra):
        cfg = _env_config(tiny_model, tmp_path / "run", **{"env.max_turns": 6, **extra})
        return build_experience_source(SourceContext.for_evaluation(resolve(cfg, "eval"), engine, tokenizer)).evaluate()

    greedy = run()
    sampled = run(**{"eval.samples": 4, "eval.temperature": 2.0})
    assert sampled.report == greedy.report and sampled.samples[:3] == greedy.samples
    episodes = [s for s in sampled.samples if s.get("eval_mode") == "sampled"]
    assert len(episodes) == 12 and [e["task_id"] for e in episodes] == [t for t in (100, 101, 102) for _ in range(4)]
    counts = [sum(e["won"] for e in episodes if e["task_id"] == t) for t in (100, 101, 102)]
    assert sampled.extra["sampled/accuracy"] == pytest.approx(sum(counts) / 12)
    assert sampled.extra["sampled/pass@4"] == pytest.approx(sum(c > 0 for c in counts) / 3)
    assert {"sampled/mean_turns", "sampled/invalid_action_rate", "sampled/mean_return"} <= set(sampled.extra)
    assert sampled.extra["sampled/temperature"] == 2.0
    assert run(**{"eval.samples": 4, "eval.temperature": 2.0}).samples == sampled.samples  # seeded by the run's seed
    assert len({json.dumps(e["trajectory"]) for e in episodes}) > 1


def test_sampled_evaluation_from_the_cli_and_in_a_training_run(tiny_model, tmp_path):
    out = tmp_path / "run"
    result = run_cli(["train", *env_args(tiny_model, out, **{"eval.samples": 2, "train.steps": 2, "logging.plots": True})])
    assert result.exit_code == 0, result.output
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 2]
    assert all({"sampled/accuracy", "sampled/ci_low", "sampled/ci_high", "sampled/pass@2"} <= set(e) for e in evals)
    assert "sampled (2 per item, T 1)" in result.output
    assert (out / "plots/eval_accuracy.png").stat().st_size > 0
    ev = run_cli(["eval", "--model", str(tiny_model), "--samples", "3", "--config", *env_args(tiny_model, out)])
    assert ev.exit_code == 0, ev.output
    assert "sampled (3 per item, T 1)" in ev.output and "pass@3" in ev.output


def test_paired_difference_by_hand():
    a = [1.0, 0.5, 1.0, 0.0, 0.75]
    b = [0.5, 0.5, 0.25, 0.0, 0.5]
    d = PairedDifference.from_item_rates(a, b)
    diffs = [0.5, 0.0, 0.75, 0.0, 0.25]
    mean = sum(diffs) / 5
    sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / 4)
    half = 1.959963984540054 * sd / math.sqrt(5)
    assert (d.difference, d.ci_low, d.ci_high) == pytest.approx((mean, mean - half, mean + half))
    assert str(d).startswith("+30.0 points (95% CI +")
    same = PairedDifference.from_item_rates(a, a)
    assert same.difference == 0 and same.ci_low == same.ci_high == 0  # identical policies: no doubt
    with pytest.raises(ValueError, match="same items"):
        PairedDifference.from_item_rates(a, b[:3])
    assert math.isnan(PairedDifference.from_item_rates([], []).difference)


def test_grove_eval_puts_several_suites_and_models_in_one_table(tiny_model, tmp_path, monkeypatch):
    from grove.cli import terminal
    from grove.models.tiny import create_tiny_model_dir

    monkeypatch.setattr(terminal.console, "width", 160)  # a terminal as wide as the table

    other = create_tiny_model_dir(tmp_path / "other", seed=1)
    arithmetic = tmp_path / "arithmetic.yaml"
    arithmetic.write_text(f"seed: 0\nmodel: {{name: {tiny_model}}}\ntask: {{id: arithmetic, train_size: 8, eval_size: 4}}\n"
                          "rollout: {max_new_tokens: 4}\n")
    corridor = tmp_path / "corridor.yaml"
    corridor.write_text("seed: 0\n" + "".join(f"{k}: {v}\n" for k, v in {
        "model": f"{{name: {tiny_model}}}", "env": ENV_BASE["env"], "rollout": "{max_new_tokens: 5, temperature: 1.0}",
    }.items()))
    args = ["eval", "--config", str(arithmetic), "--config", str(corridor), "--model", str(tiny_model), "--model",
            str(other), "--samples", "2", "--max-examples", "3"]
    result = run_cli(args)
    assert result.exit_code == 0, result.output
    table = result.output[result.output.index("held-out evaluation"):]
    assert "arithmetic" in table and "corridor" in table and "pass@k" in table and "@2 " in table
    assert "vs first model" in table and "+0.0 (+0.0 to +0.0)" in table  # the second model against the first
    assert result.output.count(" on arithmetic: ") == 2 and result.output.count(" on env ") == 2


def test_suite_and_model_labels_are_the_shortest_telling_tails():
    from grove.cli.eval_suites import short_labels

    assert short_labels(["runs/a/model", "runs/b/model"]) == {"runs/a/model": "a/model", "runs/b/model": "b/model"}
    assert short_labels(["configs/math.yaml", "smollm2-135m"]) == {"configs/math.yaml": "math.yaml",
                                                                   "smollm2-135m": "smollm2-135m"}
    assert short_labels(["x"]) == {"x": "x"}
