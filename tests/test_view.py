"""``grove view``: the static report of a run, built from tiny real runs (a single-turn run with two objectives and
an agent run on the corridor environment, each with a synthetic token_details.jsonl) and from hand-made run
directories; its data files, the size rule, bad input, the comparison of two runs, and the page in headless
Chromium (skipped, saying why, where Chromium or chromedriver cannot be found)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import pytest
from tests.tiny_runs import TESTS, run_config
from typer.testing import CliRunner

from grove.cli import app
from grove.view import NotARunError, build_report
from grove.view.run_comparison import compare_runs
from grove.view.run_contents import read_run
from grove.view.sample_pages import ReportLimits, spread_evenly
from grove.view.site_writer import ReportFolderError, data_script, script_json


def jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pages(out: Path) -> dict[str, list[dict]]:
    """Every data page of a report: its id and its samples."""
    found = {}
    for page in sorted((out / "data" / "pages").glob("*.js")):
        data = script_json(page.read_text())
        found[data["page"]] = data["items"]
    return found


def overview(out: Path) -> dict:
    return script_json((out / "data" / "run.js").read_text())


# ----------------------------------------------------------------------------------------------- tiny real runs


def write_single_turn_token_details(run: Path) -> None:
    """A token_details.jsonl in the recorded format for every logged sample (``row`` = its position in the step)
    and, per step, one more group of rows that samples.jsonl lacks."""
    records = []
    by_step: dict[int, list[dict]] = {}
    for s in read_rows(run / "samples.jsonl"):
        by_step.setdefault(s["step"], []).append(s)
    for step, samples in by_step.items():
        rows = [(i, s["prompt"], s["completion"], s["rewards"]) for i, s in enumerate(samples)]
        rows += [(len(samples) + k, "an extra prompt", f"extra {k}", {"has_seven": 0.0, "short": 1.0}) for k in range(2)]
        for row, prompt, completion, rewards in rows:
            tokens = [completion[i : i + 2] for i in range(0, len(completion), 2)] or [""]
            n = len(tokens)
            records.append({
                "step": step, "row": row, "group": row // 3, "trajectory": None, "turn": None, "anchor": None,
                "prompt": prompt, "token_ids": list(range(n)), "tokens": tokens,
                "logprob": [-0.1 * (i + 1) for i in range(n)], "entropy": [0.05 * i for i in range(n)],
                "advantage": [0.5 - row * 0.2] * n, "loss_mask": [1] * n, "kept": [i % 2 for i in range(n)],
                "rewards": rewards, "sequence_advantage": 0.5 - row * 0.2,
            })
    jsonl(run / "token_details.jsonl", records)


def write_agent_token_details(run: Path) -> None:
    """Token details of each logged trajectory: one record per turn (per-step prompts) and, for the first, one
    conversation whose observation tokens are not trained on."""
    records = []
    by_step: dict[int, list[dict]] = {}
    for s in read_rows(run / "samples.jsonl"):
        by_step.setdefault(s["step"], []).append(s)
    for step, trajectories in by_step.items():
        for index, t in enumerate(trajectories):
            for turn, entry in enumerate(t["trajectory"]):
                tokens = list(entry["model_text"]) or [""]
                n = len(tokens)
                records.append({
                    "step": step, "row": len(records), "group": t["group"], "trajectory": index, "turn": turn,
                    "anchor": entry["anchor"], "prompt": entry["observation"], "token_ids": list(range(n)),
                    "tokens": tokens, "logprob": [-1.0] * n, "entropy": [0.3] * n, "advantage": [0.25 - index * 0.1] * n,
                    "loss_mask": [1] * n, "kept": None, "rewards": {"env_reward": entry["reward"]},
                    "sequence_advantage": 0.25 - index * 0.1,
                    "step_advantages": [{"turn": turn, "episode": 0.2, "step": round(0.05 - index * 0.1, 4)}],
                })
        first = trajectories[0]
        tokens, mask = [], []
        for entry in first["trajectory"]:
            tokens += [entry["observation"][:6], "\n"]
            mask += [0, 0]
            tokens += [entry["model_text"] or " "]
            mask += [1]
        records.append({
            "step": step, "row": len(records), "group": first["group"], "trajectory": 0, "turn": None, "anchor": None,
            "prompt": "conversation", "token_ids": list(range(len(tokens))), "tokens": tokens,
            "logprob": [-0.5] * len(tokens), "entropy": [0.2] * len(tokens), "advantage": [0.1] * len(tokens),
            "loss_mask": mask, "kept": None, "rewards": {}, "sequence_advantage": 0.1,
        })
    jsonl(run / "token_details.jsonl", records)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from grove.models.tiny import create_tiny_model_dir

    return create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def objectives_run(tiny_model, tmp_path_factory) -> Path:
    """Four steps of arithmetic with two objectives from one reward (``has_seven``, ``short``) and a second reward,
    two groups of three completions per step, every completion logged, evaluated every two steps; with token
    details."""
    from grove.training.trainer import Trainer

    sys.path.insert(0, str(TESTS))  # the run's user rewards
    out = tmp_path_factory.mktemp("objectives") / "run"
    cfg = run_config(tiny_model, out, 4, **{
        "rewards": "[{id: 'user_rewards:two_checks'}, {id: answer_match, extract: last_number, name: acc}]",
        "checkpoint.every": 10, "logging.samples_per_step": 6, "eval.before_training": True, "eval.max_examples": 3,
        "eval.every": 2,
    })
    Trainer(cfg, out).run()
    write_single_turn_token_details(out)
    return out


@pytest.fixture(scope="module")
def agent_run(tiny_model, tmp_path_factory) -> Path:
    """Four GiGPO steps on the corridor environment (per-step prompts), evaluated every two steps; with token
    details."""
    from grove.resolve import load_config
    from grove.training.trainer import Trainer

    out = tmp_path_factory.mktemp("agent") / "run"
    overrides = {
        "model.name": tiny_model, "output_dir": out, "threads": 1,
        "env": "{id: 'tests.agent_envs:corridor', params: {length: 3}, max_turns: 4, action_parser: {id: raw}}",
        "rollout.max_new_tokens": 4, "rollout.temperature": 1.0, "train.steps": 4, "train.prompts_per_step": 2,
        "train.completions_per_prompt": 3, "train.micro_batch_size": 4, "optim.lr": 1e-3, "checkpoint.every": 10,
        "eval.max_examples": 3, "eval.every": 2, "logging.progress": False, "logging.plots": False, "logging.tensorboard": False, "logging.samples_per_step": 6,
        "algorithm.advantage": "{id: gigpo, gamma: 0.9}",
    }
    Trainer(load_config(None, [f"{k}={v}" for k, v in overrides.items()]), out).run()
    write_agent_token_details(out)
    return out


def test_report_of_a_single_turn_run_with_objectives(objectives_run, tmp_path):
    out = tmp_path / "view"
    index = build_report(objectives_run, out)
    assert index == out / "index.html" and index.exists()
    html = index.read_text()
    assert '<script src="data/run.js"></script>' in html and "assets/main.js" in html and "http" not in html
    assert html.index("assets/dom.js") < html.index("assets/samples.js") < html.index("assets/main.js")
    for asset in ("report.css", "dom.js", "data_loader.js", "charts.js", "tokens.js", "samples.js", "main.js"):
        assert (out / "assets" / asset).stat().st_size > 0
    data = overview(out)
    assert data["run"]["kind"] == "single_turn" and data["run"]["name"] == "run"
    assert data["objectives"][:2] == ["has_seven", "short"]
    assert data["metrics"]["steps"] == [1, 2, 3, 4] and "reward_mean" in data["metrics"]["series"]
    assert [e["step"] for e in data["evals"]] == [0, 2, 4]
    assert data["token_details"]["present"] and data["config_text"].startswith("imports:")
    assert [k["key"] for k in data["samples"]["train"]["keys"]] == ["1", "2", "3", "4"]
    assert [k["key"] for k in data["samples"]["eval"]["keys"]] == ["0/greedy", "2/greedy", "4/greedy"]
    items = [it for page in pages(out).values() for it in page if it["_key"] == "1"]
    assert len(items) == 8  # the six logged rows and the two rows known only from their token details
    logged = [it for it in items if not it.get("from_token_details")]
    assert [it["row"] for it in logged] == list(range(6)) and [it["group"] for it in logged] == [0, 0, 0, 1, 1, 1]
    assert all(it["details"]["tokens"] and len(it["details"]["logprob"]) == len(it["details"]["tokens"]) for it in items)
    assert "".join(logged[0]["details"]["tokens"]) == logged[0]["completion"]
    extra = [it for it in items if it.get("from_token_details")]
    assert [it["completion"] for it in extra] == ["extra 0", "extra 1"] and extra[0]["details"]["kept"] == [0, 1, 0, 1]


def test_report_of_an_agent_run_attaches_token_details_per_turn(agent_run, tmp_path):
    out = tmp_path / "view"
    build_report(agent_run, out)
    data = overview(out)
    assert data["run"]["kind"] == "agent" and data["objectives"] == []
    assert any(k in data["metrics"]["series"] for k in ("success_rate", "episode_return_mean"))
    items = [it for page in pages(out).values() for it in page if it["_key"] == "2"]
    assert items and all(it["trajectory"] and "task_id" in it for it in items)
    first = items[0]
    turns = [d["turn"] for d in first["details"]]
    assert turns == [*range(len(first["trajectory"])), None]  # one record per turn, then the conversation
    conversation = first["details"][-1]
    assert 0 in conversation["loss_mask"] and 1 in conversation["loss_mask"]
    held_out = [it for page in pages(out).values() for it in page if it["_key"].endswith("/greedy")]
    assert held_out and all("trajectory" in it and "won" in it for it in held_out)


def test_a_run_without_token_details_has_no_token_data(objectives_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(objectives_run, run, ignore=shutil.ignore_patterns("checkpoints", "token_details.jsonl"))
    out = tmp_path / "view"
    build_report(run, out)
    assert not overview(out)["token_details"]["present"]
    assert not any("details" in it for page in pages(out).values() for it in page)


# ------------------------------------------------------------------------------------------------ the size rule


def test_spread_evenly_keeps_the_first_and_the_last():
    assert spread_evenly(list(range(10)), 20) == list(range(10))
    assert spread_evenly(list(range(101)), 5) == [0, 25, 50, 75, 100]
    assert spread_evenly(list(range(7)), 1) == [6]
    kept = spread_evenly(list(range(1, 501)), 50)
    assert len(kept) == 50 and kept[0] == 1 and kept[-1] == 500


def big_run(root: Path, steps: int, per_step: int) -> Path:
    run = root / "big"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\nenv: null\nsft: null\n")
    jsonl(run / "metrics.jsonl", [{"step": s, "reward_mean": s / steps, "step_seconds": 1.0} for s in range(1, steps + 1)])
    jsonl(run / "samples.jsonl", [
        {"step": s, "prompt": f"What is {s} + {k}?", "completion": f"{s + k} " * 20, "finish_reason": "eos",
         "rewards": {"answer_match": float(k % 2)}}
        for s in range(1, steps + 1) for k in range(per_step)
    ])
    return run


def test_pages_are_bounded_and_opening_reads_one_page(tmp_path):
    """10,000 samples over 500 steps: 50 steps kept, spread evenly; pages of at most 200 samples; the overview holds
    no sample."""
    run = big_run(tmp_path, steps=500, per_step=20)
    out = tmp_path / "view"
    build_report(run, out, limits=ReportLimits(max_steps=50, page_samples=200))
    data = overview(out)
    train = data["samples"]["train"]
    assert train["keys_total"] == 500 and len(train["keys"]) == 50 and train["samples"] == 50 * 20
    assert train["keys"][0]["key"] == "1" and train["keys"][-1]["key"] == "500"
    found = pages(out)
    assert len(found) == 5 and all(len(items) <= 200 for items in found.values())
    assert sum(len(items) for items in found.values()) == 1000
    for entry in train["keys"]:  # each step's samples are in the pages its index names
        held = [it for p in entry["pages"] for it in found[p] if it["_key"] == entry["key"]]
        assert len(held) == entry["count"] == 20
    assert (out / "data" / "run.js").stat().st_size < 200_000


def test_page_bytes_bound_a_page_of_long_samples(tmp_path):
    run = big_run(tmp_path, steps=4, per_step=10)
    out = tmp_path / "view"
    build_report(run, out, limits=ReportLimits(page_bytes=600, max_text_chars=30))
    found = pages(out)  # a page closes before the sample that would take it past 600 bytes (a sample is < 300)
    assert len(found) >= 10 and all(len(json.dumps(items)) < 600 + 300 for items in found.values())
    assert all(it["completion"].endswith("more characters not shown]") for items in found.values() for it in items)


def test_curves_are_thinned_to_the_point_limit(tmp_path):
    run = big_run(tmp_path, steps=3000, per_step=1)
    out = tmp_path / "view"
    build_report(run, out, limits=ReportLimits(max_curve_points=1000))
    metrics = overview(out)["metrics"]
    assert len(metrics["steps"]) == 1000 and metrics["steps"][0] == 1 and metrics["steps"][-1] == 3000
    assert metrics["steps_total"] == 3000


# ------------------------------------------------------------------------------------ hand-made and bad run dirs


def test_not_a_run_directory_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(NotARunError, match=f"{tmp_path / 'absent'} is not a directory"):
        build_report(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotARunError, match=r"empty is not a run directory: it has none of config.yaml, metrics.jsonl"):
        build_report(tmp_path / "empty")
    result = CliRunner().invoke(app, ["view", str(tmp_path / "empty")])
    assert result.exit_code == 2 and "error:" in result.output and "is not a run directory" in result.output


def test_an_out_folder_holding_other_files_is_refused_and_a_report_is_replaced(tmp_path):
    run = big_run(tmp_path, steps=3, per_step=2)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(ReportFolderError, match="not a grove view report"):
        build_report(run, taken)
    assert (taken / "notes.txt").read_text() == "mine"
    out = build_report(run, limits=ReportLimits(page_samples=1)).parent
    assert out == run / "view" and len(pages(out)) == 6
    build_report(run, limits=ReportLimits(page_samples=3))  # a second report replaces the first, pages included
    assert len(pages(out)) == 2


def test_a_run_with_damaged_lines_and_missing_files(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\nnot json\n{"step": 2, "reward_mean": 0.7}\n')
    (run / "eval_samples_step000002.jsonl").write_text('{"prompt": "p", "completion": "c", "correct": true}\n[1, 2]\n')
    with caplog.at_level(logging.WARNING):
        out = build_report(run).parent
    assert "skipped line(s) 2" in caplog.text
    data = overview(out)
    assert data["metrics"]["steps"] == [1, 2] and data["run"]["kind"] == "single_turn"
    assert any(m.startswith("config.yaml") for m in data["missing"])
    assert any(m.startswith("samples.jsonl") for m in data["missing"]) and any(m.startswith("eval.jsonl") for m in data["missing"])
    assert [k["key"] for k in data["samples"]["eval"]["keys"]] == ["2/greedy"] and data["samples"]["train"]["keys"] == []


def test_an_sft_run_shows_what_it_has(tmp_path):
    run = tmp_path / "sft"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\nenv: null\nsft:\n  data: [demos.jsonl]\n")
    jsonl(run / "metrics.jsonl", [{"step": s, "loss": 1.0 / s, "entropy": 0.5, "step_seconds": 2.0} for s in (1, 2)])
    jsonl(run / "eval.jsonl", [{"step": s, "held_out_loss": 1.0 / (s + 1), "accuracy": 0.2, "correct": 2, "total": 10,
                                "ci_low": 0.05, "ci_high": 0.5} for s in (0, 2)])
    jsonl(run / "eval_samples_step000002.jsonl", [{"prompt": "p", "completion": "c", "answer": "a", "correct": False}])
    out = build_report(run).parent
    data = overview(out)
    assert data["run"]["kind"] == "sft" and not any(m.startswith("samples.jsonl") for m in data["missing"])
    assert data["samples"]["train"]["keys"] == [] and len(data["samples"]["eval"]["keys"]) == 1


def test_data_scripts_cannot_end_their_script_early():
    payload = {"text": "a </script><script>alert(1)</script> b \u2028 c", "n": 1}
    script = data_script(payload)
    assert "</script" not in script and "\u2028" not in script
    assert script_json(script) == payload


def test_non_finite_numbers_become_null(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text('{"step": 1, "prompt": "p", "completion": "c", "rewards": {"r": NaN}}\n')
    out = build_report(run).parent
    (item,) = [it for items in pages(out).values() for it in items]
    assert item["rewards"] == {"r": None}


# ------------------------------------------------------------------------------------------------------ compare


def single_turn_eval_run(root: Path, name: str, outcomes: dict[str, bool], step: int = 4) -> Path:
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\nenv: null\nsft: null\n")
    correct = sum(outcomes.values())
    jsonl(run / "eval.jsonl", [{"step": step, "accuracy": correct / len(outcomes), "correct": correct,
                                "total": len(outcomes), "ci_low": 0.1, "ci_high": 0.9}])
    jsonl(run / "eval_samples_step000000.jsonl", [{"prompt": p, "completion": "old", "correct": False} for p in outcomes])
    jsonl(run / f"eval_samples_step{step:06d}.jsonl",
          [{"prompt": p, "completion": f"{name} on {p}", "answer": "x", "correct": ok} for p, ok in outcomes.items()])
    return run


def test_compare_matches_single_turn_items_by_prompt_at_each_runs_last_evaluation(tmp_path):
    a = single_turn_eval_run(tmp_path, "a", {"p1": True, "p2": True, "p3": False, "p4": False, "only-a": True})
    b = single_turn_eval_run(tmp_path, "b", {"p1": True, "p2": False, "p3": True, "p4": False, "only-b": True}, step=6)
    c = compare_runs(read_run(a), read_run(b), max_items=100, max_chars=1000)
    assert c["matched"] == 4 and c["only_in_a"] == 1 and c["only_in_b"] == 1 and c["matched_by"] == "prompt"
    assert c["counts"] == {"both": 1, "only_a": 1, "only_b": 1, "neither": 1, "unknown": 0}
    assert [r["step"] for r in c["runs"]] == [4, 6] and c["runs"][0]["accuracy"] == 0.6
    assert [r["matched_correct"] for r in c["runs"]] == [2, 2]
    assert [i["verdict"] for i in c["items"]][:2] == ["only_a", "only_b"]  # disagreements first
    first = c["items"][0]
    assert first["key"] == "p2" and first["a"]["text"] == "a on p2" and first["b"]["outcome"] is False
    out = tmp_path / "view"
    build_report(a, out, compare_dir=b)
    assert overview(out)["compare"]["counts"]["both"] == 1
    result = CliRunner().invoke(app, ["view", str(a), "--out", str(tmp_path / "cli"), "--compare", str(b)])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(tmp_path / "cli" / "index.html")


def test_compare_matches_agent_items_by_task_id_with_sampled_outcomes(tmp_path):
    runs = []
    for name, won in (("a", {7: True, 8: False}), ("b", {7: False, 8: False, 9: True})):
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text("env:\n  id: frozenlake\n")
        turn = {"observation": "o", "anchor": "0", "model_text": "left", "action": "left", "valid": True, "reward": 0.0}
        rows = [{"group": i, "task_id": t, "return": float(w), "won": w, "turns": 1, "ended": "done", "trajectory": [turn]}
                for i, (t, w) in enumerate(won.items())]
        rows += [{**rows[0], "eval_mode": "sampled", "won": k == 0} for k in range(4)]
        jsonl(run / "eval_samples_step000010.jsonl", rows)
        runs.append(read_run(run))
    c = compare_runs(*runs, max_items=100, max_chars=1000)
    assert c["kind"] == "agent" and c["matched_by"] == "task_id" and c["matched"] == 2 and c["only_in_b"] == 1
    assert c["counts"]["only_a"] == 1 and c["counts"]["neither"] == 1
    assert c["items"][0]["key"] == "7" and c["items"][0]["a"]["sampled"] == [1, 4] and c["items"][0]["a"]["text"] == "left"
    mixed = compare_runs(runs[0], read_run(single_turn_eval_run(tmp_path, "s", {"p": True})), 10, 100)
    assert "agent run" in mixed["error"] and "single_turn run" in mixed["error"]


# ------------------------------------------------------------------------------------------------- in a browser


def _screenshots():
    """``scripts/viewer_screenshot.py``, whose functions open a report in headless Chromium and picture it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("viewer_screenshot", TESTS.parent / "scripts" / "viewer_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


shots = _screenshots()
open_report = shots.open_report
javascript_errors = shots.javascript_errors


def browser_or_skip():
    """A headless Chromium driven by selenium; skips, saying what is missing, where it cannot start."""
    try:
        return shots.start_chromium()
    except shots.NoBrowser as exc:
        pytest.skip(str(exc))


def screenshot(browser, path: Path, selector: str | None = None, hover: str | None = None, publish: bool = True) -> Path:
    """A picture kept with the test's files and, where ``publish``, copied to $GROVE_VIEW_SCREENSHOTS when it is set
    (``make viewer-screenshots`` writes docs/img/viewer*.png so)."""
    shots.capture(browser, path, selector, hover)
    target = os.environ.get("GROVE_VIEW_SCREENSHOTS")
    if target and publish:
        shutil.copy(path, Path(target) / path.name)
    return path


def test_browser_agent_report(agent_run, tmp_path):
    """The agent run's report in headless Chromium: no JavaScript error, its sections, a trajectory expanded by a
    click with its turns, each turn's advantage parts and coloured tokens, environment tokens marked as not trained
    on."""
    browser = browser_or_skip()
    try:
        index = build_report(agent_run, tmp_path / "view")
        open_report(browser, index)
        ids = browser.execute_script("return [...document.querySelectorAll('section.section')].map(s => s.id);")
        assert ids == ["overview", "trajectories"]
        assert browser.execute_script("return document.querySelectorAll('#overview .chart svg path.line').length;") > 3
        overview = browser.find_element("id", "overview").text
        assert "Held-out evaluations" in overview
        assert "GiGPO step credit" in overview and "anchor-group sizes" in overview
        logged = list(dict.fromkeys(k for line in (agent_run / "metrics.jsonl").read_text().splitlines()
                                     for k in json.loads(line)))
        for title, prefix in (("anchor-group sizes", "anchor_group_size_hist/"),
                              ("advantage RMS by turn", "advantage/advantage_rms_turn/")):
            legend = browser.execute_script(
                "const f = [...document.querySelectorAll('#overview figure.chart')]"
                ".find((c) => c.querySelector('figcaption').textContent.startsWith(arguments[0]));"
                "return [...f.querySelectorAll('.legend .key')].map((k) => k.textContent);", title)
            bins = [k for k in logged if k.startswith(prefix)]
            assert len(bins) >= 2 and legend == bins, (title, legend)  # every logged bin, in the logged order
        summary = browser.find_element("css selector", "#trajectories .traj-summary")
        assert not browser.find_element("css selector", "#trajectories .turn-grid").is_displayed() if browser.find_elements(
            "css selector", "#trajectories .turn-grid") else True
        summary.click()
        card = browser.find_element("css selector", "#trajectories .trajectory.open")
        turns = card.find_elements("css selector", ".turn")
        assert turns and turns[0].is_displayed() and "observation" in turns[0].text.lower()
        parts = turns[0].find_element("css selector", ".adv-parts").text  # GiGPO's A^E and ω·A^S of the turn
        assert parts.startswith("advantage") and "episode" in parts and "step" in parts
        shots.choose(browser, "#trajectories .colour-select", "advantage")
        card = browser.find_element("css selector", "#trajectories .trajectory")
        card.find_element("css selector", ".traj-summary").click()
        coloured = browser.execute_script(
            "return [...document.querySelectorAll('#trajectories .trajectory.open .tok')].filter(t => t.style.background).length;")
        assert coloured > 0
        assert browser.execute_script("return document.querySelectorAll('#trajectories .tok.untrained').length;") > 0
        assert "advantage per token" in browser.find_element("css selector", "#trajectories .legend-slot").text
        screenshot(browser, tmp_path / "viewer_agent_overview.png", "#overview", publish=False)
        screenshot(browser, tmp_path / "viewer_agent_trajectories.png", "#trajectories", hover="#trajectories .open .tok")
        assert javascript_errors(browser) == []
    finally:
        browser.quit()


def test_browser_objectives_report_with_compare(objectives_run, tmp_path):
    """The two-objective run's report compared with a copy of itself: no JavaScript error; samples coloured by
    log-prob with a legend and hover values; the group view; the objectives table; the comparison."""
    browser = browser_or_skip()
    try:
        other = tmp_path / "other"
        shutil.copytree(objectives_run, other, ignore=shutil.ignore_patterns("checkpoints"))
        index = build_report(objectives_run, tmp_path / "view", compare_dir=other)
        open_report(browser, index)
        ids = browser.execute_script("return [...document.querySelectorAll('section.section')].map(s => s.id);")
        assert ids == ["overview", "samples", "objectives", "compare"]
        shots.choose(browser, "#samples .colour-select", "logprob")
        coloured = browser.execute_script("return [...document.querySelectorAll('#samples .tok')].filter(t => t.style.background).length;")
        assert coloured > 0
        assert "probability" in browser.find_element("css selector", "#samples .legend-slot").text
        browser.execute_script(
            "const t = document.querySelector('#samples .tok');"
            "t.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 100, clientY: 100}));")
        tooltip = browser.find_element("id", "tooltip")
        assert tooltip.is_displayed() and "log-prob" in tooltip.text
        screenshot(browser, tmp_path / "viewer_samples.png", "#samples", hover="#samples article.sample:nth-child(2) .tok")
        shots.choose(browser, "#samples select[aria-label=view]", "groups")
        assert browser.execute_script("return document.querySelectorAll('#samples .group-grid .group-member').length;") >= 3
        assert "has_seven" in browser.find_element("id", "objectives").text
        compare = browser.find_element("id", "compare").text
        assert "matched by prompt" in compare and "both right" in compare
        screenshot(browser, tmp_path / "viewer_objectives.png", "#objectives")
        screenshot(browser, tmp_path / "viewer_compare.png", "#compare", publish=False)
        assert javascript_errors(browser) == []
    finally:
        browser.quit()


def test_browser_opens_a_run_of_10000_samples_within_2_seconds(tmp_path):
    """10,000 samples over 500 steps (the default limits keep 100 steps): the page is drawn, with its first step's
    samples, less than 2 s after navigation starts (on a machine whose load is at most its core count; the bound
    grows with the load beyond that); it has read the overview and one page; the next step's page loads on
    demand."""
    browser = browser_or_skip()
    try:
        index = build_report(big_run(tmp_path, steps=500, per_step=20), tmp_path / "view")
        load = max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
        open_report(browser, index)
        elapsed_ms = browser.execute_script("return performance.now();")
        assert elapsed_ms < 2000 * load, f"{elapsed_ms:.0f} ms at a load of {load:.1f} per core"
        assert browser.execute_script("return document.querySelectorAll('#samples article.sample').length;") == 20
        loaded = browser.execute_script("return [...document.scripts].filter(s => s.src.includes('/pages/')).length;")
        assert loaded == 1
        browser.find_element("css selector", "#samples .step-nav button[title=next]").click()
        browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "(function wait() { if (document.querySelector('#samples .status').textContent.startsWith('samples')) done();"
            " else setTimeout(wait, 20); })();")
        shown = browser.execute_script("return document.querySelector('#samples .step-select').selectedOptions[0].textContent;")
        assert shown == "step 6 (20)"  # the second of the 100 steps kept of 1..500
        assert browser.execute_script("return document.querySelector('#samples article.sample header').textContent;").startswith("row 0")
        assert javascript_errors(browser) == []
    finally:
        browser.quit()


def test_serve_serves_the_report_folder(tmp_path):
    import threading
    import urllib.request

    from grove.view.view_command import report_server

    out = build_report(big_run(tmp_path, steps=2, per_step=2)).parent
    with report_server(out, 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        try:
            page = urllib.request.urlopen(base + "index.html", timeout=10).read().decode()
            data = urllib.request.urlopen(base + "data/run.js", timeout=10).read().decode()
        finally:
            server.shutdown()
    assert "<title>grove view · big</title>" in page and script_json(data)["run"]["name"] == "big"


def test_token_details_join_their_sample_by_collected_row_and_trajectory_id():
    """A record joins the samples.jsonl completion at its ``sample_row`` (not its trained-batch ``row``, which sample
    selection shifts) and the trajectory whose ``trajectory_id`` is its ``trajectory`` (not a position)."""
    from grove.view.sample_records import agent_training, single_turn_training

    samples = [{"step": 1, "prompt": "p", "completion": f"c{i}", "rewards": {}} for i in range(4)]
    detail = {"step": 1, "row": 0, "sample_row": 2, "group": 0, "prompt": "p", "tokens": ["c", "2"],
              "logprob": [0.0, 0.0], "entropy": [0.0, 0.0], "advantage": [1.0, 1.0], "loss_mask": [1, 1],
              "kept": None, "sequence_advantage": 1.0}
    rows = single_turn_training(samples, [detail], 1000, 100)[1]
    assert [r["completion"] for r in rows if "details" in r] == ["c2"]

    episodes = [{"step": 1, "group": 1, "trajectory_id": 5, "trajectory": []},
                {"step": 1, "group": 1, "trajectory_id": 7, "trajectory": []}]
    agent_detail = {**detail, "trajectory": 7, "turn": 0}
    rows = agent_training(episodes, [agent_detail], 1000, 100)[1]
    assert [r["trajectory_id"] for r in rows if "details" in r] == [7] and len(rows) == 2
