"""Agent rollout speed: rollout tokens/s and environment steps/s of one step's episodes, no training.

Builds the policy, tokenizer, engine and environment source from an example config as the trainer does, then
plays ``--rounds`` rounds of one training step's groups (``train.prompts_per_step`` groups ×
``train.completions_per_prompt`` environments; one batched generate per turn over the live environments),
each round from the next tasks and seeds of the training sampler. Per round and as medians: generation,
environment and other seconds (prompt building and tokenisation = wall − generation − environment; the
environment's time as ``run_episodes`` counts it: reset, parse, step and the prompter's record),
tokens/s, environment steps/s, the token positions the prefill forwards ran (``rollout.prefix_reuse`` cuts
them), the live environments of each turn, peak RSS.

    python benchmarks/multi_turn_rollout.py --rounds 5 --precision fp32
    python benchmarks/multi_turn_rollout.py --config examples/sokoban_gigpo.yaml --precision bf16
    python benchmarks/multi_turn_rollout.py --precision bf16 --set rollout.prefix_reuse=false   # without reuse
    python benchmarks/multi_turn_rollout.py --tiny --rounds 1 --warmup 0   # smoke run, a tiny random model

``--precision``: fp32 (float32 weights, no autocast), bf16 (generation from a bfloat16 copy of the weights,
``rollout.bf16_weights``), bf16-autocast (float32 weights under bfloat16 autocast: the trainer's mode for
``train.precision: bf16`` without ``rollout.bf16_weights``). The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time

import torch

import grove.builtin_components  # noqa: F401
from grove.config import load_config
from grove.experience import SourceContext, build_experience_source
from grove.infra.precision import autocast
from grove.infra.runtime import configure_runtime, release_host_memory
from grove.models.pretrained import load_policy
from grove.rollout.generation_weights import GenerationWeights
from grove.rollout.hf_engine import TransformersEngine

COLUMNS = [  # (key, header, format)
    ("turns", "turns", "{:.0f}"), ("actions", "actions", "{:.0f}"), ("env_steps", "env steps", "{:.0f}"),
    ("tokens", "gen tokens", "{:.0f}"), ("prompt_tokens_run", "prefill tokens", "{:.0f}"), ("generation_s", "gen s", "{:.2f}"), ("environment_s", "env s", "{:.3f}"),
    ("other_s", "other s", "{:.3f}"), ("wall_s", "wall s", "{:.2f}"), ("tokens_per_s", "tok/s (wall)", "{:.1f}"),
    ("tokens_per_generation_s", "tok/s (gen)", "{:.1f}"), ("env_steps_per_s", "steps/s (wall)", "{:.2f}"),
    ("env_steps_per_environment_s", "steps/s (env)", "{:.0f}"),
]


class TimedEngine(TransformersEngine):
    """The trainer's engine, recording each batched generate call: (rows, generated tokens, seconds), and the
    token positions (pads included) its prefill forwards ran."""

    calls: list[tuple[int, int, float]]
    prefilled: int = 0

    def _run(self, ids, attn, positions, cache):
        self.prefilled += ids.numel()
        return super()._run(ids, attn, positions, cache)

    def generate(self, prompt_token_ids, n, sampling, generator):
        out = super().generate(prompt_token_ids, n, sampling, generator)
        self.calls.append((len(prompt_token_ids) * n, out.num_generated_tokens, out.seconds))
        return out


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def one_round(source, engine: TimedEngine, precision: str) -> dict:
    engine.calls, engine.prefilled = [], 0
    starts = source.draw_starts()  # the trainer's next (task, seed) starts
    start = time.perf_counter()
    with autocast("fp32" if precision == "fp32" else "bf16"):
        run = source.play(starts, source.group_size, source.sampling)
    wall = time.perf_counter() - start
    release_host_memory()  # as the trainer does after generation
    gen, env = run.generation_seconds, run.environment_seconds
    return {
        "episodes": len(run.trajectories),
        "turns": len(engine.calls),
        "actions": sum(len(t.turns) for t in run.trajectories),
        "env_steps": run.environment_steps,
        "tokens": run.generated_tokens,
        "prompt_tokens_run": engine.prefilled,
        "generation_s": gen,
        "environment_s": env,
        "other_s": wall - gen - env,
        "wall_s": wall,
        "tokens_per_s": run.generated_tokens / wall,
        "tokens_per_generation_s": run.generated_tokens / max(gen, 1e-9),
        "env_steps_per_s": run.environment_steps / wall,
        "env_steps_per_environment_s": run.environment_steps / max(env, 1e-9),
        "live_per_turn": [rows for rows, _, _ in engine.calls],
        "generation_s_per_turn": [round(s, 4) for _, _, s in engine.calls],
        "won": sum(t.won for t in run.trajectories),
        "errors": run.errors,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/frozenlake_gigpo.yaml")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (one step's groups each)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds played first and not measured")
    parser.add_argument("--precision", choices=["fp32", "bf16", "bf16-autocast"], default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (grove.models.tiny) instead")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set train.prompts_per_step=4 --set env.max_turns=4")
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            from grove.models.tiny import create_tiny_model_dir

            tiny = create_tiny_model_dir(f"{tmp}/tiny", max_position_embeddings=2048)  # agent prompts run past 512
            overrides.insert(0, f"model.name={tiny}")
        cfg = load_config(args.config, overrides)
        configure_runtime(**cfg.runtime_settings(args.threads))
        torch.manual_seed(cfg.seed)
        model, tokenizer = load_policy(cfg.model.name, dtype=getattr(torch, cfg.model.dtype))
    model.eval().requires_grad_(False)
    if args.precision == "bf16":  # what build_policy_models does with rollout.bf16_weights
        model = GenerationWeights(model).model
    engine = TimedEngine(model, tokenizer, reuse_prefixes=cfg.rollout.prefix_reuse)
    source = build_experience_source(SourceContext.for_evaluation(cfg, engine, tokenizer))
    if not hasattr(source, "play"):
        parser.error(f"{args.config} is not an environment config (experience source {cfg.source_id!r})")
    for _ in range(args.warmup):
        one_round(source, engine, args.precision)
    rounds = [one_round(source, engine, args.precision) for _ in range(args.rounds)]

    groups, size = cfg.train.prompts_per_step, cfg.train.completions_per_prompt
    print(f"{args.config}: env {cfg.env.id}, {groups} groups × {size} environments, max_turns {cfg.env.max_turns}, "
          f"max_new_tokens {cfg.rollout.max_new_tokens}, model {'tiny' if args.tiny else cfg.model.name}, "
          f"{args.precision}, {args.threads} threads, {args.warmup} warm-up round(s)\n")
    print("| round | " + " | ".join(h for _, h, _ in COLUMNS) + " | live envs per turn |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    medians = {k: statistics.median(r[k] for r in rounds) for k, _, _ in COLUMNS}
    for label, row in [*((str(i + 1), r) for i, r in enumerate(rounds)), ("median", medians)]:
        live = " ".join(map(str, row["live_per_turn"])) if "live_per_turn" in row else ""
        print(f"| {label} | " + " | ".join(f.format(row[k]) for k, _, f in COLUMNS) + f" | {live} |")
    result = {
        "config": args.config, "env": cfg.env.id, "model": "tiny" if args.tiny else cfg.model.name,
        "precision": args.precision, "threads": args.threads, "groups": groups, "group_size": size,
        "max_turns": cfg.env.max_turns, "max_new_tokens": cfg.rollout.max_new_tokens,
        "warmup": args.warmup, "median": medians, "rounds": rounds, "peak_rss_gb": peak_rss_gb(),
    }
    print(f"\npeak RSS {result['peak_rss_gb']:.2f} GB")
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
