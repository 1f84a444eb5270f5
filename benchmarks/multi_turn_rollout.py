"""Agent rollout speed: one step's episodes against single-turn generation at the same batch size, no training.

Builds the policy (``model.init_from``'s warm start when the config names one), its generation copy
(bfloat16 or prepacked, as the trainer builds it), the engine and the environment source from an example
config, then plays ``--rounds`` rounds of one training step's groups (``train.prompts_per_step`` groups ×
``train.completions_per_prompt`` environments; one batched generate per turn over the live environments),
each round from the next tasks and seeds of the training sampler. After each round a **single-turn
companion** generates once from that round's first-turn contexts (one row per environment, the same sampling
and new-token budget) and its *decode* tokens/s (tokens over the time after the prefill) is the yardstick:
``ratio`` = the rollout's tokens/s over the wall clock ÷ that decode rate. Per round and as medians:
generation seconds (and the prefill's part), environment and other seconds (prompt building and
tokenisation = wall − generation − environment; the environment's time as ``run_episodes`` counts it: reset,
parse, step and the prompter's record), the token positions the prefill forwards ran (pads included; in all
and per generated token), the live environments of each turn, peak RSS.

    python benchmarks/multi_turn_rollout.py --rounds 5 --precision fp32
    python benchmarks/multi_turn_rollout.py --config examples/sokoban_gigpo.yaml --precision bf16
    python benchmarks/multi_turn_rollout.py --precision bf16 --set rollout.prefix_reuse=false   # without reuse
    python benchmarks/multi_turn_rollout.py --set model.init_from=null   # the base model
    python benchmarks/multi_turn_rollout.py --tiny --rounds 1 --warmup 0   # smoke run, a tiny random model
    python benchmarks/multi_turn_rollout.py --device cuda --precision bf16 --set rollout.engine=transformers

``--precision`` sets the trainer's settings: fp32 (``train.precision: fp32``, no bf16 copy: a prepacked fp32
copy), bf16 (a bfloat16 copy, ``rollout.bf16_weights``), bf16-autocast (float32 weights under bfloat16
autocast). ``--device cuda`` runs on a GPU with the engine ``rollout.engine`` picks there (``auto``: the
static-cache engine for the decoders it runs). The last line is ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from collections import Counter

import torch

import grove.resolve  # noqa: F401  (registers every built-in component)
from grove.config.derived import generation_rollout
from grove.experience import SourceContext, build_experience_source
from grove.infra.precision import autocast
from grove.infra.runtime import configure_runtime, release_host_memory
from grove.models.initial_weights import policy_source
from grove.models.pretrained import load_policy
from grove.resolve import load_config, resolve
from grove.rollout_engines import build_rollout_engine, engine_choice
from grove.training.policy_models import build_generation_weights

COLUMNS = [  # (key, header, format)
    ("turns", "turns", "{:.0f}"), ("actions", "actions", "{:.0f}"), ("tokens", "gen tokens", "{:.0f}"),
    ("prompt_tokens_run", "prefill tokens", "{:.0f}"), ("prefill_per_token", "prefill per gen token", "{:.1f}"),
    ("generation_s", "gen s", "{:.2f}"), ("prefill_s", "of it prefill s", "{:.2f}"), ("environment_s", "env s", "{:.3f}"),
    ("other_s", "other s", "{:.3f}"), ("wall_s", "wall s", "{:.2f}"), ("tokens_per_s", "tok/s (wall)", "{:.1f}"),
    ("single_decode_tokens_per_s", "single-turn decode tok/s", "{:.1f}"), ("vs_single_decode", "ratio", "{:.2f}"),
    ("env_steps_per_environment_s", "steps/s (env)", "{:.0f}"),
]
# the trainer's settings each --precision stands for
PRECISIONS = {
    "fp32": ["train.precision=fp32", "rollout.bf16_weights=false"],
    "bf16": ["train.precision=bf16", "rollout.bf16_weights=true"],
    "bf16-autocast": ["train.precision=bf16", "rollout.bf16_weights=false"],
}


class TimedEngine:
    """The trainer's engine (``rollout.engine``), recording each batched generate call: (rows, generated tokens,
    seconds, prefill seconds), its prompts, and the token positions (pads included) its prefill forwards ran. Both
    built-in engines prefill through ``_prefill(ids, mask)`` and run each prefill forward through ``_run(ids, …)``,
    which are timed and counted on the instance."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.calls: list[tuple[int, int, float, float]] = []
        self.prompts: list[list[list[int]]] = []
        self.prefilled = 0
        self._prefill_seconds = 0.0
        run, prefill = engine._run, engine._prefill

        def counted_run(ids, *args, **kwargs):
            self.prefilled += ids.numel()
            return run(ids, *args, **kwargs)

        def timed_prefill(*args, **kwargs):
            start = time.perf_counter()
            try:
                return prefill(*args, **kwargs)
            finally:
                self._prefill_seconds += time.perf_counter() - start

        engine._run, engine._prefill = counted_run, timed_prefill

    def __getattr__(self, name):  # model, tokenizer, pad_token_id, reusing_prefixes, ...
        return getattr(self.engine, name)

    def generate(self, prompt_token_ids, n, sampling, generator):
        self._prefill_seconds = 0.0
        out = self.engine.generate(prompt_token_ids, n, sampling, generator)
        self.calls.append((len(prompt_token_ids) * n, out.num_generated_tokens, out.seconds, self._prefill_seconds))
        self.prompts.append(prompt_token_ids)
        return out


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def one_round(source, engine: TimedEngine, precision: str, seed: int, device: str = "cpu") -> dict:
    engine.calls, engine.prompts, engine.prefilled = [], [], 0
    starts = source.draw_starts()  # the trainer's next (task, seed) starts
    start = time.perf_counter()
    with autocast(precision, device):
        run = source.play(starts, source.group_size, source.sampling)
    wall = time.perf_counter() - start
    release_host_memory()  # as the trainer does after generation
    calls, prefilled = engine.calls, engine.prefilled
    single = single_turn(source, engine, engine.prompts[0], precision, seed, device)
    gen, env = run.generation_seconds, run.environment_seconds
    tokens_per_s = run.generated_tokens / wall
    return {
        "episodes": len(run.trajectories),
        "turns": len(calls),
        "actions": sum(len(t.turns) for t in run.trajectories),
        "env_steps": run.environment_steps,
        "tokens": run.generated_tokens,
        "prompt_tokens_run": prefilled,
        "prefill_per_token": prefilled / max(run.generated_tokens, 1),
        "generation_s": gen,
        "prefill_s": sum(p for *_, p in calls),
        "environment_s": env,
        "other_s": wall - gen - env,
        "wall_s": wall,
        "tokens_per_s": tokens_per_s,
        "tokens_per_generation_s": run.generated_tokens / max(gen, 1e-9),
        "single_decode_tokens_per_s": single["decode_tokens_per_s"],
        "vs_single_decode": tokens_per_s / single["decode_tokens_per_s"],
        "env_steps_per_s": run.environment_steps / wall,
        "env_steps_per_environment_s": run.environment_steps / max(env, 1e-9),
        "live_per_turn": [rows for rows, *_ in calls],
        "generation_s_per_turn": [round(s, 4) for _, _, s, _ in calls],
        "prefill_s_per_turn": [round(p, 4) for *_, p in calls],
        "single_turn": single,
        "won": sum(t.won for t in run.trajectories),
        "errors": run.errors,
    }


def single_turn(
    source, engine: TimedEngine, prompts: list[list[int]], precision: str, seed: int, device: str = "cpu"
) -> dict:
    """The companion single-turn run: one generate call from the round's first-turn contexts (one row per
    environment, the same sampling and new-token budget), outside any multi-turn reuse. Decode tokens/s counts
    the generated tokens over the time after the prefill."""
    engine.calls, engine.prompts = [], []
    with autocast(precision, device):
        out = engine.generate(prompts, 1, source.sampling, torch.Generator().manual_seed(seed))
    rows, tokens, seconds, prefill = engine.calls[0]
    return {
        "rows": rows, "tokens": tokens, "seconds": seconds, "prefill_s": prefill,
        "decode_tokens_per_s": tokens / max(seconds - prefill, 1e-9), "tokens_per_s": tokens / seconds,
        "finish_reasons": dict(Counter(out.finish_reasons)),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/frozenlake_gigpo.yaml")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds (one step's groups each)")
    parser.add_argument("--warmup", type=int, default=1, help="rounds played first and not measured")
    parser.add_argument("--precision", choices=["fp32", "bf16", "bf16-autocast"], default="fp32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (grove.models.tiny) instead")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set train.prompts_per_step=4 --set env.max_turns=4")
    args = parser.parse_args(argv)
    overrides = [*PRECISIONS[args.precision], *args.overrides]
    with tempfile.TemporaryDirectory() as tmp:
        if args.tiny:
            from grove.models.tiny import create_tiny_model_dir

            tiny = create_tiny_model_dir(f"{tmp}/tiny", max_position_embeddings=2048)  # agent prompts run past 512
            overrides[:0] = [f"model.name={tiny}", "model.init_from=null"]
        cfg = load_config(args.config, overrides)
        configure_runtime(**cfg.runtime_settings(args.threads))
        torch.manual_seed(cfg.seed)
        # the trainer's weights (the warm start of model.init_from) and generation copy (bf16 / prepacked)
        model, tokenizer = load_policy(policy_source(cfg.model.name, cfg.model.init_from),
                                       dtype=getattr(torch, cfg.model.dtype))
    device = torch.device(args.device)
    model.to(device).eval().requires_grad_(False)
    generation = build_generation_weights(cfg, model, device)
    if generation is not None:
        model = generation.model
    engine_id = engine_choice(cfg.rollout.engine, model, device)[0]
    engine = TimedEngine(build_rollout_engine(generation_rollout(cfg), model, tokenizer))
    source = build_experience_source(SourceContext.for_evaluation(resolve(cfg, "eval"), engine, tokenizer))
    if not hasattr(source, "play"):
        parser.error(f"{args.config} is not an environment config (experience source {cfg.source_id!r})")
    precision = cfg.train.precision
    for i in range(args.warmup):
        one_round(source, engine, precision, seed=i, device=args.device)
    rounds = [one_round(source, engine, precision, seed=args.warmup + i, device=args.device) for i in range(args.rounds)]

    groups, size = cfg.train.prompts_per_step, cfg.train.completions_per_prompt
    print(f"{args.config}: env {cfg.env.id}, {groups} groups × {size} environments, max_turns {cfg.env.max_turns}, "
          f"max_new_tokens {cfg.rollout.max_new_tokens}, model {'tiny' if args.tiny else cfg.model.name}, "
          f"{args.precision}, engine {engine_id}, {args.device}, {args.threads} threads, {args.warmup} warm-up round(s)\n")
    print("| round | " + " | ".join(h for _, h, _ in COLUMNS) + " | live envs per turn |")
    print("|---" * (len(COLUMNS) + 2) + "|")
    medians = {k: statistics.median(r[k] for r in rounds) for k, _, _ in COLUMNS}
    for label, row in [*((str(i + 1), r) for i, r in enumerate(rounds)), ("median", medians)]:
        live = " ".join(map(str, row["live_per_turn"])) if "live_per_turn" in row else ""
        print(f"| {label} | " + " | ".join(f.format(row[k]) for k, _, f in COLUMNS) + f" | {live} |")
    result = {
        "config": args.config, "env": cfg.env.id, "model": "tiny" if args.tiny else cfg.model.name,
        "precision": args.precision, "engine": engine_id, "device": args.device, "threads": args.threads, "groups": groups, "group_size": size,
        "max_turns": cfg.env.max_turns, "max_new_tokens": cfg.rollout.max_new_tokens,
        "warmup": args.warmup, "median": medians, "rounds": rounds, "peak_rss_gb": peak_rss_gb(),
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None,
    }
    gpu = f", peak GPU memory {result['peak_gpu_gb']:.2f} GB" if result["peak_gpu_gb"] is not None else ""
    print(f"\npeak RSS {result['peak_rss_gb']:.2f} GB{gpu}")
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
