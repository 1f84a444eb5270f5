"""benchmarks/multi_turn_rollout.py runs end to end on a tiny random model (one round of FrozenLake episodes and its
single-turn companion) and its RESULT line holds consistent numbers."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_multi_turn_rollout_benchmark_on_a_tiny_model(capsys) -> None:
    main = runpy.run_path(str(ROOT / "benchmarks" / "multi_turn_rollout.py"))["main"]
    overrides = ["train.prompts_per_step=2", "train.completions_per_prompt=2", "rollout.max_new_tokens=4",
                 "env.max_turns=3", "host_allocator=system",
                 "env.action_parser={id: full_text}"]  # every non-empty answer reaches the environment
    argv = ["--tiny", "--rounds", "1", "--warmup", "0", "--threads", "1",
            "--config", str(ROOT / "examples" / "frozenlake_gigpo.yaml")]
    for o in overrides:
        argv += ["--set", o]
    main(argv)
    out = capsys.readouterr().out
    assert "| median |" in out
    result = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert (result["env"], result["groups"], result["group_size"], result["precision"]) == ("frozenlake", 2, 2, "fp32")
    (r,) = result["rounds"]
    assert r["episodes"] == 4 and 1 <= r["turns"] <= 3
    assert r["tokens"] > 0 and r["env_steps"] > 0 and r["env_steps"] <= r["actions"]
    assert r["live_per_turn"][0] == 4 and sum(r["live_per_turn"]) == r["actions"]
    assert r["live_per_turn"] == sorted(r["live_per_turn"], reverse=True)  # the batch only shrinks
    assert r["generation_s"] > 0 and r["environment_s"] > 0 and r["other_s"] >= 0
    assert r["generation_s"] + r["environment_s"] + r["other_s"] == pytest.approx(r["wall_s"])
    assert r["tokens_per_s"] == pytest.approx(r["tokens"] / r["wall_s"])
    assert r["env_steps_per_environment_s"] == pytest.approx(r["env_steps"] / r["environment_s"])
    assert r["prompt_tokens_run"] > 0 and r["prefill_per_token"] == pytest.approx(r["prompt_tokens_run"] / r["tokens"])
    assert 0 < r["prefill_s"] < r["generation_s"] and len(r["prefill_s_per_turn"]) == r["turns"]
    single = r["single_turn"]  # the companion: one generate from the first turn's contexts, one row per environment
    assert single["rows"] == 4 and 0 < single["tokens"] <= 4 * 4 and 0 < single["prefill_s"] < single["seconds"]
    assert single["decode_tokens_per_s"] == pytest.approx(single["tokens"] / (single["seconds"] - single["prefill_s"]))
    assert r["vs_single_decode"] == pytest.approx(r["tokens_per_s"] / single["decode_tokens_per_s"])
    assert result["median"]["tokens"] == r["tokens"] and result["peak_rss_gb"] > 0
