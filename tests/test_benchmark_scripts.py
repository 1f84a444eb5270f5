"""The benchmark scripts that call grove in-process run end to end on tiny shapes (the output projection's
gradient check included), so a refactor cannot silently break them."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_output_projection_benchmark_runs_and_checks_gradients(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "argv", ["output_projection.py", "--rows", "37", "--vocab", "300", "--hidden", "8",
                                      "--repeats", "1", "--threads", "1", "--host-allocator", "system"])
    runpy.run_path(str(BENCHMARKS / "output_projection.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "gradients equal to naive's" in out
    for name in ("naive", "checkpointed", "grove-cache", "grove-recompute"):
        assert f"| {name} |" in out


def test_update_speed_benchmark_runs_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/update_speed.py drives the pipeline stages directly (collect, update): run it end to end."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["update_speed.py", "--repeats", "1", "--threads", "1",
                                      "--variants", "packed-fp32", "padded-fp32",
                                      "--set", f"model.name={model}", "--set", "rollout.max_new_tokens=4",
                                      "--set", "host_allocator=system", "--profile", "3"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    runpy.run_path(str(BENCHMARKS / "update_speed.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "| packed-fp32 |" in out and "| padded-fp32 |" in out
    assert "packed-fp32, the last update under the profiler" in out and "Self CPU" in out


def test_token_details_benchmark_runs_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/token_details.py: runs with the records off, every step and every 2 steps, and their ratios."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["token_details.py", "--every", "0", "1", "2", "--steps", "3", "--repeats", "1",
                                      "--set", f"model.name={model}", "--set", "threads=1",
                                      "--set", "rollout.max_new_tokens=4", "--set", "train.prompts_per_step=2",
                                      "--set", "train.completions_per_prompt=2", "--set", "host_allocator=system"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    runpy.run_path(str(BENCHMARKS / "token_details.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "round 1 off" in out and "3 recorded steps" in out and "2 recorded steps" in out
    assert "| off | " in out and "| every 1 | " in out and "| every 2 | " in out
    assert out.rstrip().splitlines()[-3].endswith("| – | 1.000 |")  # the baseline records nothing


def test_gigpo_benchmark_calibrate_and_report_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/gigpo.py: calibrate plays episodes; report tabulates and plots run directories."""
    import json

    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "model", seed=0)
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import their shared seeded_runs.py
    config = tmp_path / "c.yaml"
    config.write_text(
        f"model: {{name: {model}}}\nthreads: 1\n"
        "env: {id: 'tests.agent_envs:corridor', max_turns: 3, action_parser: {id: raw}}\n"
        "rollout: {max_new_tokens: 4}\ntrain: {prompts_per_step: 2, completions_per_prompt: 2}\n"
        "algorithm: {advantage: {id: gigpo}}\n"
    )
    monkeypatch.setattr(sys, "argv", ["gigpo.py", "calibrate", str(config), "--groups", "2"])
    runpy.run_path(str(BENCHMARKS / "gigpo.py"), run_name="__main__")
    printed = capsys.readouterr().out
    calibration = json.loads(printed[printed.index("{") :])
    assert {"success_rate", "invalid_action_rate", "forward_tokens_per_env_step"} <= set(calibration)
    assert calibration["episodes"] == 4
    # a fake finished comparison: two methods, one seed each
    for method in ("episode_grpo", "gigpo"):
        run = tmp_path / "bench" / f"{method}-seed0"
        run.mkdir(parents=True)
        rows = [{"step": s, "success_rate": 0.1 * s, "turns_per_episode": 3, "invalid_action_rate": 0.5,
                 "step_seconds": 2.0, "elapsed_seconds": 2.0 * s} for s in (1, 2, 3)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "eval.jsonl").write_text(json.dumps({"step": 0, "accuracy": 0.0}) + "\n"
                                        + json.dumps({"step": 3, "accuracy": 0.5}) + "\n")
        (run / "summary.json").write_text("{}")
    png = tmp_path / "g.png"
    monkeypatch.setattr(sys, "argv", ["gigpo.py", "report", str(tmp_path / "bench"), "--png", str(png)])
    runpy.run_path(str(BENCHMARKS / "gigpo.py"), run_name="__main__")
    text = capsys.readouterr().out
    assert "| bench | gigpo | 1 |" in text and png.stat().st_size > 0
    assert "Held-out" not in text  # no per-item evaluations: the training table only


def _write_held_out(run: Path, step: int, greedy: list[bool], sampled: list[list[bool]]) -> None:
    import json

    rows = [{"task_id": 100 + i, "won": w} for i, w in enumerate(greedy)]
    rows += [{"task_id": 100 + i, "won": w, "eval_mode": "sampled"} for i, ws in enumerate(sampled) for w in ws]
    (run / f"eval_samples_step{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_gigpo_report_held_out_intervals_by_hand(tmp_path, monkeypatch, capsys) -> None:
    """The held-out tables: per-run and pooled success with intervals over items, and the paired difference."""
    import json
    import math

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from held_out import SeedInterval, held_out, paired_difference, pooled

    # 4 items, 2 samples each; method a wins items 0-1 always, b only item 0; seeds alike
    for method, wins in (("episode_grpo", {0}), ("gigpo", {0, 1})):
        for seed in (0, 1):
            run = tmp_path / "bench" / f"{method}-seed{seed}"
            run.mkdir(parents=True)
            rows = [{"step": s, "success_rate": 0.5, "turns_per_episode": 3, "invalid_action_rate": 0.0,
                     "step_seconds": 2.0, "trained_tokens": 10 * (s % 2), "elapsed_seconds": 2.0 * s} for s in (1, 2)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (run / "eval.jsonl").write_text("".join(json.dumps({"step": s, "accuracy": 0.25}) + "\n" for s in (0, 2)))
            _write_held_out(run, 0, [True, False, False, False], [[True, False], [False, False], [False] * 2, [False] * 2])
            _write_held_out(run, 2, [i in wins for i in range(4)], [[i in wins] * 2 for i in range(4)])
            (run / "summary.json").write_text("{}")
    # a run still under way: its last evaluation is the warm start's, so it must not count as a result
    under_way = tmp_path / "bench" / "gigpo-seed2"
    under_way.mkdir()
    (under_way / "metrics.jsonl").write_text(json.dumps({"step": 1, "success_rate": 0.0, "step_seconds": 2.0}) + "\n")
    (under_way / "eval.jsonl").write_text(json.dumps({"step": 0, "accuracy": 0.25}) + "\n")
    _write_held_out(under_way, 0, [False] * 4, [[False] * 2] * 4)
    runs = {m: [held_out(tmp_path / "bench" / f"{m}-seed{s}") for s in (0, 1)] for m in ("episode_grpo", "gigpo")}
    assert pooled(runs["gigpo"], "sampled").accuracy == 0.5 and pooled(runs["gigpo"], "sampled").samples == 4
    diff = paired_difference(runs["gigpo"], runs["episode_grpo"], "sampled")
    assert diff.items == 4 and diff.difference == 0.25  # item rates (1,1,0,0) - (1,0,0,0)
    sd = math.sqrt(((0.75**2) + 3 * (0.25**2)) / 3)
    assert (diff.ci_low, diff.ci_high) == (
        pytest.approx(0.25 - 1.959964 * sd / 2, abs=1e-5),
        pytest.approx(0.25 + 1.959964 * sd / 2, abs=1e-5),
    )
    seeds = SeedInterval.of([0.1, 0.2, 0.3])
    assert (seeds.low, seeds.high) == (
        pytest.approx(0.2 - 4.303 * 0.1 / math.sqrt(3)),
        pytest.approx(0.2 + 4.303 * 0.1 / math.sqrt(3)),
    )
    assert seeds.show(10, " turns", 1) == "+2.0 turns (95% CI -0.5 to +4.5; seeds +1.0, +2.0, +3.0)"
    monkeypatch.setattr(sys, "argv", ["gigpo.py", "report", str(tmp_path / "bench"), "--level", "0.5"])
    runpy.run_path(str(BENCHMARKS / "gigpo.py"), run_name="__main__")
    text = capsys.readouterr().out
    assert "| gigpo | 1 | 50% (15–85) | 50.0% (" in text
    assert "| gigpo | 2 | 25.0% (" in text and "→ **50.0% (" in text
    assert "| gigpo | 0 | 50% (15–85) | 50.0% (" in text and "| 2 | 2.0 (2.0) |" in text  # reached at step 2
    assert "| episode_grpo | 0 | 25% (" in text and "| not reached |" in text
    assert "gigpo − episode_grpo, sampled: paired by item +25.0 points" in text
    assert "across seeds +25.0 (95% CI +25.0 to +25.0; seeds +25, +25)" in text
    assert "Not finished (left out; `run` resumes them): gigpo-seed2" in text


def test_gigpo_report_turns_to_goal_and_diagnostics_by_hand(tmp_path, monkeypatch, capsys) -> None:
    """Turns on held-out successes (pooled, and paired by item against the baseline) and the step-credit
    diagnostics averaged over the steps (NaN steps left out; a method without the metric shows a dash)."""
    import json

    turns_after = {"episode_grpo": (8, 10), "gigpo": (6, 6)}
    for method, (t0, t1) in turns_after.items():
        run = tmp_path / "bench" / f"{method}-seed0"
        run.mkdir(parents=True)
        extra = ({"advantage/step_episode_corr": 0.5}, {"advantage/step_episode_corr": 0.7},
                 {"advantage/step_episode_corr": float("nan")}) if method == "gigpo" else ({}, {}, {})
        # anchor groups per step: 4 (1 singleton), 2 (both singletons), 4 (all singletons)
        sizes = ({"anchor_groups": 4, "anchor_group_size_hist/1": 1, "anchor_group_size_hist/2+": 3},
                 {"anchor_groups": 2, "anchor_group_size_hist/1": 2, "anchor_group_size_hist/2+": 0},
                 {"anchor_groups": 4, "anchor_group_size_hist/1": 4, "anchor_group_size_hist/2+": 0})
        rows = [{"step": s, "success_rate": 0.5, "turns_per_episode": 3, "invalid_action_rate": 0.0,
                 "step_seconds": 2.0, "elapsed_seconds": 2.0 * s, **sizes[s - 1], **extra[s - 1]} for s in (1, 2, 3)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run / "eval.jsonl").write_text("".join(json.dumps({"step": s, "accuracy": 0.5}) + "\n" for s in (0, 3)))
        before = [{"task_id": 0, "won": True, "turns": 10}, {"task_id": 1, "won": False, "turns": 20}]
        after = [{"task_id": 0, "won": True, "turns": t0}, {"task_id": 1, "won": True, "turns": t1}]
        for step, evals in ((0, before), (3, after)):
            (run / f"eval_samples_step{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
        (run / "summary.json").write_text("{}")
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    png = tmp_path / "turns.png"
    monkeypatch.setattr(sys, "argv", ["gigpo.py", "report", str(tmp_path / "bench"), "--png", str(png)])
    script = runpy.run_path(str(BENCHMARKS / "gigpo.py"), run_name="__main__")
    text = capsys.readouterr().out
    assert png.stat().st_size > 0
    # the plot's third column: turns on held-out successes at each evaluation step
    mode, steps, means = script["turns_of_wins_by_step"](script["runs_by_variant"](tmp_path / "bench"))["gigpo"]
    assert (mode, steps, [m.mean for m in means], [m.items for m in means]) == ("greedy", [0, 3], [10.0, 6.0], [1, 2])
    # episode_grpo: item 0 in 8 turns, item 1 in 10: mean 9, sd sqrt(2), half-width 1.96 * sqrt(2) / sqrt(2)
    assert "- episode_grpo, greedy: 10.00 turns (nan–nan, 1 items) → **9.00 turns (7.04–10.96, 2 items)**" in text
    assert "- gigpo, greedy: 10.00 turns (nan–nan, 1 items) → **6.00 turns (6.00–6.00, 2 items)**" in text
    # paired by item: 6 - 8 and 6 - 10
    assert ("- gigpo − episode_grpo, greedy, paired by item: -3.00 turns (-4.96–-1.04, 2 items); "
            "across seeds -3.00 turns (seeds -3.00)") in text
    corr = "corr(A_S, A_E)"
    header = next(line for line in text.splitlines() if line.startswith("| method | steps in shared"))
    column = header.split(" | ").index(corr)
    gigpo_row = next(line for line in text.splitlines() if line.startswith("| gigpo | ") and "—" in line)
    assert gigpo_row.split(" | ")[column] == "0.60"
    grpo_row = next(line for line in text.splitlines() if line.startswith("| episode_grpo | ") and "—" in line)
    assert grpo_row.split(" | ")[column] == "—"
    # the share of a step's anchor groups per size, averaged over steps: (1/4 + 2/2 + 4/4) / 3 singletons
    assert "| method | 1 | 2+ |" in text and "| gigpo | 75 % | 25 % |" in text


def test_multi_objective_benchmark_runs_and_reports_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/multi_objective.py: one seed of two reward combiners on a tiny model, both at once (``--parallel``),
    then the table and the PNG (the runs' log files beside their directories are not runs); each finished run's
    checkpoints are removed, its logs kept."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "model", seed=0)
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent) + ":" + str(Path(__file__).parents[1] / "src"))
    out = tmp_path / "bench"
    overrides = [f"model.name={model}", "threads=1", "task.train_size=8", "task.eval_size=4",
                 "rewards=[{id: 'user_rewards:two_checks'}, {id: answer_match, extract: last_number, name: acc}]",
                 "rollout.max_new_tokens=4", "train.steps=1", "train.prompts_per_step=2",
                 "train.completions_per_prompt=2", "checkpoint.every=10", "logging.tensorboard=false"]
    argv = ["multi_objective.py", "run", "examples/arithmetic.yaml", "--out", str(out), "--seeds", "0",
            "--combiners", "sum_then_normalize", "normalize_then_sum", "--parallel", "2"]
    for o in overrides:
        argv += ["--set", o]
    png = tmp_path / "mo.png"
    report = ["multi_objective.py", "report", str(out), "--png", str(png), "--met-at", "acc=1", "--at", "0",
              "--steps", "1", "1"]
    for args in (argv, report):
        monkeypatch.setattr(sys, "argv", args)
        with pytest.raises(SystemExit) as e:
            runpy.run_path(str(BENCHMARKS / "multi_objective.py"), run_name="__main__")
        assert e.value.code == 0
    printed = capsys.readouterr().out
    assert "| `normalize_then_sum` | has_seven |" in printed and "| `sum_then_normalize` | acc |" in printed
    assert "advantage values per group" in printed and "| all met |" in printed
    assert "| `normalize_then_sum` after − before (paired by prompt) | 1 |" in printed
    assert "advantage share (median)" in printed
    assert "Steps 1-1 alone" in printed and "Held-out at step 0, pooled over seeds" in printed
    assert "| `normalize_then_sum` − `sum_then_normalize` (across 1 seeds) |" in printed
    assert (out / "sum_then_normalize-seed0.log").stat().st_size > 0 and (out / "normalize_then_sum-seed0.log").exists()
    assert png.stat().st_size > 0
    for combiner in ("sum_then_normalize", "normalize_then_sum"):
        assert (out / f"{combiner}-seed0" / "metrics.jsonl").exists()
        assert not (out / f"{combiner}-seed0" / "checkpoints").exists()


def test_step_grpo_benchmark_report_and_method_check(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/step_grpo.py: the table and PNG from run directories (routing accuracy absent where nothing was
    searched), and an unknown method is refused before anything runs."""
    import json

    for method, searched in (("outcome_grpo", False), ("step_grpo", True)):
        for seed in (0, 1):
            run = tmp_path / "bench" / f"{method}-seed{seed}"
            run.mkdir(parents=True)
            rows = [{"step": s, "step_seconds": 3.0 + seed} for s in (1, 2)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            evals = []
            for step, acc in ((0, 0.1), (2, 0.2 + 0.1 * seed)):
                e = {"step": step, "answer_accuracy": acc, "searches_per_question": 0.5 if searched else 0.0,
                     "quiz/answer_accuracy": acc / 2, "kb/none/searches_per_question": 0.25 * seed}
                if searched:
                    e["kb/tables/routing_accuracy"] = 1.0 - 0.5 * seed
                if searched:
                    e["routing_accuracy"] = 0.5
                evals.append(e)
            (run / "eval.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
            # the last evaluation's episodes, two questions: step_grpo searches (rightly on q0, wrongly on q1)
            def episode(task, won, queries):
                route = ("tables", "pictures")[task]  # the question's gold route, in every step's info
                turns = [{"valid": True, "info": {"step_type": "query", "routing_correct": ok, "route": route}}
                         for ok in queries]
                answer = {"valid": True, "info": {"step_type": "answer", "route": route}}
                return {"task_id": task, "won": won, "trajectory": [*turns, answer]}

            rows = [episode(0, True, [True] if searched else []), episode(1, searched and seed == 0, [False] if searched else [])]
            rows.append({**episode(0, False, []), "eval_set": "quiz"})  # another evaluation set: not an item
            (run / "eval_samples_step000002.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (run / "summary.json").write_text("{}")  # finished
    png = tmp_path / "s.png"
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", ["step_grpo.py", "report", str(tmp_path / "bench"), "--png", str(png)])
    runpy.run_path(str(BENCHMARKS / "step_grpo.py"), run_name="__main__")
    text = capsys.readouterr().out
    assert "| outcome_grpo | 2 | 10.0% → 25.0% (20, 30) | – (no searches) |" in text
    assert "| step_grpo | 2 | 10.0% → 25.0% (20, 30) | 50.0% → 50.0% (50, 50) |" in text
    # pooled by question: outcome_grpo answers q0 always, q1 never; step_grpo q1 in one seed of two
    assert "| outcome_grpo | 2 | 50.0% (" in text and "| step_grpo | 2 | 75.0% (" in text
    assert "| 50.0% (-48.0–148.0, 2 items) | 1.00 (1.00–1.00, 2 items) |" in text  # routing 1 and 0; one search each
    assert "step_grpo − outcome_grpo, paired by question: answer accuracy +25.0 (-24.0 to +74.0, 2 questions)" in text
    # per run: seed 0 of step_grpo answers both questions (100 %), seed 1 one of two; 2 steps of 4 s = 0.1 min
    assert "| step_grpo | 0 | 100.0% (" in text and "| step_grpo | 1 | 50.0% (" in text and "| 0.1 min |" in text
    assert "step_grpo − outcome_grpo, across seeds: answer accuracy +25.0 (95% CI" in text and "seeds +50, +0)" in text
    assert "| step_grpo | 2 | 0.75 (1.00, 0.50) | 0.12 (0.00, 0.25) | – |" in text  # by knowledge base, after
    assert "| outcome_grpo | 2 | – | 0.12 (0.00, 0.25) | – |" in text
    # by gold route: step_grpo answers the pictures question in one seed of two, and routed it wrongly
    assert "| step_grpo | pictures | 50.0% (" in text and "| outcome_grpo | tables | 100.0% (" in text
    assert ("| step_grpo | pictures | 50.0% (nan–nan, 1 items) | 50.0% (nan–nan, 1 items) | +0.0 (+nan to +nan, 1 "
            "questions) | 0.0% (nan–nan, 1 items) | 0.0% (nan–nan, 1 items) |") in text
    assert "| outcome_grpo | pictures | 0.0% (nan–nan, 1 items) | 0.0% (nan–nan, 1 items) | +0.0 (+nan to +nan, 1 questions) | – | – | – |" in text
    # one evaluation only: after − before compares it with itself
    assert "outcome_grpo, after − before, paired by question: answer accuracy +0.0 (+0.0 to +0.0, 2 questions)" in text
    assert png.stat().st_size > 0
    monkeypatch.setattr(sys, "argv", ["step_grpo.py", "run", "cfg.yaml", "--out", str(tmp_path / "x"),
                                      "--methods", "ppo"])
    with pytest.raises(SystemExit, match="unknown methods"):
        runpy.run_path(str(BENCHMARKS / "step_grpo.py"), run_name="__main__")


def test_data_parallel_benchmark_runs_and_tabulates_its_variants_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/data_parallel.py runs the one-process variant (``--variants``) and tabulates it; each 2-rank
    variant is the same command under torchrun with its strategy and the per-rank thread count (torchrun's own
    2-rank training is tested in tests/test_distributed_cli.py)."""
    import os

    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(BENCHMARKS.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    argv = [
        "examples/arithmetic.yaml", "--out", str(tmp_path / "out"), "--steps", "2", "--threads", "1",
        "--eval-examples", "2", "--set", f"model.name={model}", "--set", "task={id: arithmetic, train_size: 16, eval_size: 2}",
        "--set", "rollout.max_new_tokens=4", "--set", "train.prompts_per_step=2",
        "--set", "train.completions_per_prompt=2", "--variants", "one process",
    ]
    monkeypatch.setattr(sys, "argv", ["data_parallel.py", *argv])
    monkeypatch.chdir(BENCHMARKS.parent)
    runpy.run_path(str(BENCHMARKS / "data_parallel.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "| one process | 1 |" in out and "| 1.00 |" in out and "| ddp × 2 |" not in out
    script = runpy.run_path(str(BENCHMARKS / "data_parallel.py"))
    args = script["parse_args"]([*argv, "--rank-threads", "3"])
    one = script["variant_command"]("one process", args, tmp_path / "one")
    for variant, strategy in (("ddp × 2", "ddp"), ("fsdp2 × 2", "fsdp2")):
        ranks = script["variant_command"](variant, args, tmp_path / "one")
        assert ranks[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m"]
        assert ranks[6:9] == one[2:5] == ["grove", "train", "examples/arithmetic.yaml"]
        assert ranks[9:11] == ["--set", f"distributed.strategy={strategy}"] and "threads=3" in ranks
        assert ranks[11:] == [a if a != "threads=1" else "threads=3" for a in one[5:]]


def test_step_memory_benchmark_prints_each_phase_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/step_memory.py: two steps, RSS per phase (generation, update, after the update)."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["step_memory.py", "--set", f"model.name={model}", "--set", "threads=1",
                                      "--set", "rollout.max_new_tokens=4", "--set", "train.prompts_per_step=2",
                                      "--set", "train.completions_per_prompt=2", "--set", "eval.before_training=false",
                                      "--set", "optim.state_dtype=bf16"])
    runpy.run_path(str(BENCHMARKS / "step_memory.py"), run_name="__main__")
    out = capsys.readouterr().out
    for phase in ("step 1 generation", "step 1 update", "step 2 generation", "step 2 update"):
        assert f"| {phase} |" in out
    assert "peak RSS (ru_maxrss)" in out


def test_decode_step_parts_benchmark_runs_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/decode_step_parts.py: every section prints, and the fused products equal the separate ones."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["decode_step_parts.py", "--model", str(model), "--precision", "fp32",
                                      "--rows", "4", "--cached", "6", "--calls", "3", "--repeats", "2", "--threads", "1"])
    runpy.run_path(str(BENCHMARKS / "decode_step_parts.py"), run_name="__main__")
    out = capsys.readouterr().out
    for section in ("1. decode step", "2. one layer's parts", "3. decode attention forms", "4. fused products",
                    "5. KV cache"):
        assert section in out
    assert "decode_attention" in out and "(max diff 0.0e+00)" in out


def test_compiled_decode_layer_benchmark_layer_equals_transformers_layer(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/compiled_decode_layer.py, eager only: our decode layer gives transformers' samples and log-probs."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["compiled_decode_layer.py", "--model", str(model), "--precision", "fp32",
                                      "--rounds", "1", "--samples", "2", "--tokens", "5", "--threads", "1",
                                      "--no-compile"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    runpy.run_path(str(BENCHMARKS / "compiled_decode_layer.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "our eager layer gives transformers' samples and log-probs: True" in out


def test_roofline_benchmark_prints_floors_and_products_only_bounds(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/roofline.py on a tiny model: the floors, the timed decode steps, the products-only bounds and the
    measured phases' efficiencies all print, with positive values."""
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["roofline.py", "--model", str(model), "--bandwidth-mib", "16", "--threads", "1",
                                      "--prompt-tokens", "20", "--response-tokens", "40", "--decode-rows", "4",
                                      "--train-rows", "16", "--decode-steps-timed", "--products-timed",
                                      "--update-share", "0.5", "--measured", "bf16:0.5:0.25"])
    runpy.run_path(str(BENCHMARKS / "roofline.py"), run_name="__main__")
    out = capsys.readouterr().out
    floors = [line for line in out.splitlines() if line.startswith(("| fp32 | ", "| bf16 | "))]
    assert len(floors) == 2 + 2 + 2 + 2  # floors, decode steps (fp32 and bf16), products-only, measured phases
    bounds = [line for line in floors if line.count("%") == 2]  # products-only rows: decode and update bounds
    assert len(bounds) == 2
    for line in bounds:
        assert all(float(cell.strip().rstrip("%")) > 0 for cell in line.split("|") if cell.strip().endswith("%"))
    assert "| bf16 | generation |" in out and "| bf16 | update |" in out


def test_d3s_report_tokens_seconds_and_paired_difference_by_hand(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/d3s.py report: per-run and pooled held-out accuracy with intervals, the paired difference, the
    level reached in steps / gradient tokens / seconds, and the token and time ratios against GRPO."""
    import json

    # 4 problems; after training grpo solves problems 0-1, d3s problems 0-2; both start at problem 0 only
    for method, solved, tokens in (("grpo", {0, 1}, 100.0), ("d3s", {0, 1, 2}, 60.0)):
        for seed in (0, 1):
            run = tmp_path / "bench" / f"{method}-seed{seed}"
            run.mkdir(parents=True)
            rows = [{"step": s, "grad_tokens_with_signal": tokens, "trained_tokens": 150.0, "generated_tokens": 200.0,
                     "step_seconds": 3.0,
                     **({"selection/kept_samples_frac": 0.5} if method == "d3s" else {})} for s in (1, 2)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            for step, good in ((0, {0}), (2, solved)):
                samples = [{"prompt": f"q{i}", "correct": i in good} for i in range(4)]
                (run / f"eval_samples_step{step:06d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
            (run / "summary.json").write_text("{}")
    png = tmp_path / "d3s.png"
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", ["d3s.py", "report", str(tmp_path / "bench"), "--png", str(png), "--level", "0.6"])
    with pytest.raises(SystemExit) as e:
        runpy.run_path(str(BENCHMARKS / "d3s.py"), run_name="__main__")
    assert e.value.code == 0
    text = capsys.readouterr().out
    assert "| d3s | 0 | 75.0% (30.1–95.4) | 120 | 300 | 400 | 0.50 | 6 | step 2 / 120 / 6 s |" in text
    assert "| grpo | 1 | 50.0% (15.0–85.0) | 200 | 300 | 400 | 1.00 | 6 | not reached |" in text
    assert "| d3s | 2 | 25.0% (" in text and "→ **75.0% (" in text and "2 (120, 6 s) 75.0%" in text
    assert "- d3s − grpo: paired by problem +25.0 points" in text  # problem rates (1,1,1,0) - (1,1,0,0)
    assert "- d3s, greedy: 25.0% (" in text and "across seeds +50.0 (95% CI +50.0 to +50.0; seeds +50, +50)" in text
    assert "across seeds +25.0 (95% CI +25.0 to +25.0; seeds +25, +25)" in text
    assert "tokens that received gradient ×0.60, computed tokens ×1.00, generated tokens ×1.00, training seconds ×1.00" in text
    assert png.stat().st_size > 0
    monkeypatch.setattr(sys, "argv", ["d3s.py", "run", "cfg.yaml", "--out", str(tmp_path / "x"), "--methods", "ppo"])
    with pytest.raises(SystemExit, match="unknown methods"):
        runpy.run_path(str(BENCHMARKS / "d3s.py"), run_name="__main__")


def test_reward_model_rl_report_by_hand(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/reward_model_rl.py: each objective's change paired by held-out item, and the head-vs-rule
    correlation on the last evaluation (a rule's NaN leaves that completion out of the pair)."""
    import json
    import math

    run = tmp_path / "run"
    run.mkdir()
    before = [{"rm": 0.1, "rule": 0.0}, {"rm": 0.2, "rule": 0.0}, {"rm": 0.3, "rule": 1.0}, {"rm": 0.4, "rule": 0.0}]
    after = [{"rm": 0.2, "rule": 0.0}, {"rm": 0.5, "rule": 1.0}, {"rm": 0.7, "rule": 1.0}, {"rm": 0.9, "rule": math.nan}]
    for step, rows in ((0, before), (4, after)):
        lines = [json.dumps({"prompt": f"case {i}", "rewards": r}) for i, r in enumerate(rows)]
        (run / f"eval_samples_step{step:06d}.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(sys, "argv", ["reward_model_rl.py", str(run), "--pairs", "rm:rule"])
    runpy.run_path(str(BENCHMARKS / "reward_model_rl.py"), run_name="__main__")
    text = capsys.readouterr().out
    # rm: differences 0.1, 0.3, 0.4, 0.5 → mean 0.325; rule on the 3 items it applies to after: 0, +1, 0 → 0.333
    assert "| rm | 0.250 (" in text and "| 0.575 (" in text and "+0.325 (" in text and "4 items) |" in text
    assert "| rule | 0.250 (" in text and "+0.333 (" in text and "3 items) |" in text
    r = float(torch_corr([0.2, 0.5, 0.7], [0.0, 1.0, 1.0]))
    assert f"| rm : rule | 3 | {r:.2f} (nan to nan) |" in text  # three completions: r, no interval (n < 4)


def torch_corr(x: list[float], y: list[float]) -> float:
    import torch

    return float(torch.corrcoef(torch.tensor([x, y], dtype=torch.float64))[0, 1])


def test_rollout_engines_benchmark_compares_both_engines_on_a_tiny_model(tmp_path, monkeypatch, capsys) -> None:
    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["rollout_engines.py", "--device", "cpu", "--model", str(model), "--dtype", "fp32",
                                      "--rows", "4", "8", "--samples", "2", "--new-tokens", "5", "--repeats", "1",
                                      "--threads", "1"])
    runpy.run_path(str(BENCHMARKS / "rollout_engines.py"), run_name="__main__")
    out = capsys.readouterr().out
    for engine in ("transformers", "static_cache"):
        assert f"| {engine} | 4 |" in out and f"| {engine} | 8 |" in out
    assert "static_cache / transformers at 8 rows" in out and '"tokens": 40' in out  # 8 rows × 5 tokens


def test_update_mfu_benchmark_counts_the_model_flops_of_a_tiny_update(tmp_path, monkeypatch, capsys) -> None:
    import json

    from grove.models.tiny import create_tiny_model_dir

    model = create_tiny_model_dir(tmp_path / "tiny")
    monkeypatch.setattr(sys, "argv", ["update_mfu.py", "--device", "cpu", "--model", str(model), "--precision", "fp32",
                                      "--prompts", "2", "--samples", "3", "--prompt-tokens", "7",
                                      "--response-tokens", "5", "--micro-batch-size", "3", "--repeats", "1",
                                      "--threads", "1"])
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    runpy.run_path(str(BENCHMARKS / "update_mfu.py"), run_name="__main__")
    result = json.loads(capsys.readouterr().out.split("RESULT ", 1)[1])
    assert result["train_tokens"] == 2 * 7 + 6 * 5 and result["response_tokens"] == 30
    # the tiny model: 2 layers of hidden 64 (q, o: 64², k, v: 64·32, MLP: 3·64·128, two norms) and a final norm
    layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    assert result["body_params"] == 2 * layer + 64
    assert result["model_tflops_per_s"] > 0 and 0 < result["mfu_vs_matmul"]


def test_core_footprint_benchmark_times_the_start_up_of_this_tree(monkeypatch, capsys) -> None:
    """benchmarks/core_footprint.py --startup: each start-up command timed in a process of its own, tabulated."""
    monkeypatch.setattr(sys, "argv", ["core_footprint.py", "--startup", "--repeats", "1", "--no-run"])
    runpy.run_path(str(BENCHMARKS / "core_footprint.py"), run_name="__main__")
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"import grove", "fill the registries", "grove --help", "grove config show"} <= set(rows), out
    assert all(float(rows[name].split("|")[2]) > 0 for name in ("import grove", "grove config show"))
