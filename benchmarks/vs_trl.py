"""grove vs TRL's GRPOTrainer on the same GRPO work at the same precision, in separate processes, alternated.

The work: SmolLM2-135M-Instruct (the embedded model, fp32 weights), 8 prompts × 8
completions per optimizer step, prompts ≈ 45 tokens (chat template + "What is a + b? Answer with just the
number."), at most 64 new tokens, temperature 1.0, β = 0, one optimisation epoch, one optimizer step per
rollout, lr 1e-6, no gradient checkpointing, no vLLM, CPU. The workers: TRL with ``bf16=False`` (``trl``)
and ``bf16=True`` (``trl-bf16``, accelerate's bf16 autocast), grove with ``train.precision: fp32``
(``grove``) and ``bf16`` (``grove-bf16``, its defaults: bf16 autocast for the update, generation from the
bf16 weight copy), ``grove-bf16-bf16moments`` (plus ``optim.state_dtype: bf16``, the memory lever) and
``grove-bf16-bf16moments-mb64ckpt`` (plus the step's 64 completions as one micro-batch with activation
checkpointing, the bf16 update's speed lever); each
grove worker also as ``…-compiled`` (plus ``train.compile: true``: its decoder layers compiled by torch.compile,
whose compilation lands in the first step, reported apart from the medians). Each
grove precision is compared with **TRL at the same precision**. TRL is a
benchmark-only extra: ``pip install -e '.[bench]'``.

    pip install -e '.[bench]'
    python benchmarks/vs_trl.py --rounds 2 --steps 3

Each worker prints one JSON line; the parent prints per-step medians (the first step of each process is
reported separately as warm-up), phases, generated tokens/s, peak RSS, the mean share of groups whose completions
all got one reward (TRL's ``frac_reward_zero_std``, grove's ``zero_std_group_fraction``: grove leaves those
samples out of the update, ``train.skip_zero_advantage``, so its update time depends on that share; pass
``--set train.skip_zero_advantage=false`` to compute them as TRL does) and the same-precision ratios.
``--device cuda --model DIR`` runs the same comparison on a GPU with a local model directory (peak GPU
memory is then reported too); ``--set KEY=VALUE`` passes overrides to the grove workers (e.g.
``--set rollout.bf16_weights=false`` for bf16 generation under autocast from the fp32 weights). Where bf16 products
are not native (an AVX2-only CPU: ``grove.infra.precision.native_bf16_products``), the default leaves the bf16
workers out; name them with ``--impls`` to run them anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PROMPTS_PER_STEP = 8
GROUP = 8
MAX_NEW = 64
LR = 1e-6
IMPLS = ["trl", "grove", "grove-compiled", "trl-bf16", "grove-bf16", "grove-bf16-compiled", "grove-bf16-bf16moments",
         "grove-bf16-bf16moments-compiled", "grove-bf16-bf16moments-mb64ckpt", "grove-bf16-bf16moments-mb64ckpt-compiled"]
# each grove precision against TRL at the same precision
PEERS = {"grove": "trl", "grove-compiled": "trl", "grove-bf16": "trl-bf16", "grove-bf16-compiled": "trl-bf16",
         "grove-bf16-bf16moments": "trl-bf16", "grove-bf16-bf16moments-compiled": "trl-bf16",
         "grove-bf16-bf16moments-mb64ckpt": "trl-bf16", "grove-bf16-bf16moments-mb64ckpt-compiled": "trl-bf16"}
# the whole step's 64 completions as one micro-batch (TRL's per_device_train_batch_size here), with activation
# checkpointing so that it fits: in bf16 the update's per-micro-batch costs (weight casts, gradient accumulation)
# are paid once (docs/benchmarks.md)
ONE_MICRO_BATCH = ("train.micro_batch_size=64", "train.activation_checkpointing=true")
LEVERS = {  # grove workers with levers switched on
    "grove-compiled": ("train.compile=true",),
    "grove-bf16-compiled": ("train.compile=true",),
    "grove-bf16-bf16moments": ("optim.state_dtype=bf16",),
    "grove-bf16-bf16moments-compiled": ("optim.state_dtype=bf16", "train.compile=true"),
    "grove-bf16-bf16moments-mb64ckpt": ("optim.state_dtype=bf16", *ONE_MICRO_BATCH),
    "grove-bf16-bf16moments-mb64ckpt-compiled": ("optim.state_dtype=bf16", *ONE_MICRO_BATCH, "train.compile=true"),
}


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # Linux: KiB


def peak_gpu_gb() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else None


def arithmetic_examples(n: int):
    import grove.resolve  # noqa: F401  (registers every built-in component)
    from grove.tasks.task import build_task

    task = build_task(
        "arithmetic",
        {"train_size": n, "eval_size": 10, "prompt_template": "What is {question}? Answer with just the number."},
    )
    return list(task.train)


def worker_grove(
    name: str, steps: int, threads: int, precision: str, device: str, model: str | None, extra: tuple[str, ...] = ()
) -> dict:
    from grove.resolve import load_config
    from grove.training.trainer import Trainer

    out = tempfile.mkdtemp(prefix="vs_trl_grove_")
    overrides = [
        f"output_dir={out}/run", f"threads={threads}", "task.prompt_template=What is {question}? Answer with just the number.",
        f"train.prompts_per_step={PROMPTS_PER_STEP}", f"train.completions_per_prompt={GROUP}",
        f"train.steps={steps}", f"rollout.max_new_tokens={MAX_NEW}", "rollout.temperature=1.0", f"optim.lr={LR}",
        "optim.warmup_steps=0", "algorithm={preset: grpo}", "algorithm.kl.coef=0.0", "algorithm.aggregation=token_mean",
        "logging.tensorboard=false", "logging.progress=false", f"train.precision={precision}",
        f"distributed.device={device}", *([f"model.name={model}"] if model else []), *extra,
    ]
    trainer = Trainer(load_config("examples/arithmetic.yaml", overrides), __import__("pathlib").Path(out) / "run")
    rows = []
    for _ in range(steps):
        trainer.step += 1
        start = time.perf_counter()
        m = trainer.train_step()
        rows.append({
            "step": time.perf_counter() - start, "generation": m["rollout_seconds"], "train": m["train_seconds"],
            "generated_tokens": m["generated_tokens"], "zero_std_groups": m.get("zero_std_group_fraction"),
        })
    return {"impl": name, "steps": rows, "peak_rss_gb": peak_rss_gb(), "peak_gpu_gb": peak_gpu_gb()}


def worker_trl(steps: int, threads: int, precision: str, device: str, model: str | None) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grove.models.pretrained import resolve_model_path
    from grove.rewards.scoring import resolve_reward

    torch.set_num_threads(threads)
    path = model or str(resolve_model_path("smollm2-135m"))
    examples = arithmetic_examples(PROMPTS_PER_STEP * steps)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": e.prompt}], "answer": e.answer} for e in examples])
    match = resolve_reward("answer_match", {"extract": "last_number"}).fn

    def reward(prompts, completions, answer, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return match([""] * len(texts), texts, answer=answer)

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="vs_trl_trl_"), per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        num_generations=GROUP, max_completion_length=MAX_NEW, temperature=1.0, top_p=1.0, top_k=0, beta=0.0,
        num_iterations=1, learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, bf16=precision == "bf16",
        gradient_checkpointing=False, use_vllm=False, max_steps=steps, logging_steps=1, report_to=[],
        save_strategy="no", gradient_accumulation_steps=1, use_cpu=device == "cpu", shuffle_dataset=False, seed=0,
        loss_type="dapo",
    )
    trainer = GRPOTrainer(model=path, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=AutoTokenizer.from_pretrained(path, padding_side="left"))
    model = trainer.model
    timing = {"generation": 0.0}
    original_generate = model.generate

    def timed_generate(*a, **kw):  # measure TRL's generation phase without changing it
        start = time.perf_counter()
        try:
            return original_generate(*a, **kw)
        finally:
            timing["generation"] += time.perf_counter() - start

    model.generate = timed_generate
    rows: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **kw):
            timing["start"] = time.perf_counter()
            timing["generation"] = 0.0

        def on_step_end(self, *a, **kw):
            rows.append({"step": time.perf_counter() - timing["start"], "generation": timing["generation"]})

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs and rows:
                rows[-1]["generated_tokens"] = logs["completions/mean_length"] * PROMPTS_PER_STEP * GROUP
                rows[-1]["zero_std_groups"] = logs.get("frac_reward_zero_std")

    trainer.add_callback(StepTimer())
    trainer.train()
    for r in rows:
        r["train"] = r["step"] - r["generation"]
    name = "trl" if precision == "fp32" else f"trl-{precision}"
    return {"impl": name, "steps": rows, "peak_rss_gb": peak_rss_gb(), "peak_gpu_gb": peak_gpu_gb()}


def summarise(results: list[dict]) -> None:
    by_impl: dict[str, list[dict]] = {}
    for res in results:
        by_impl.setdefault(res["impl"], []).append(res)
    table = {}
    for impl, runs in by_impl.items():
        steady = [s for r in runs for s in r["steps"][1:]]
        first = [r["steps"][0]["step"] for r in runs]
        med = {k: statistics.median(s[k] for s in steady) for k in ("step", "generation", "train")}
        tok = statistics.median(s["generated_tokens"] / s["generation"] for s in steady if s.get("generated_tokens"))
        gpu = [r["peak_gpu_gb"] for r in runs if r.get("peak_gpu_gb") is not None]
        zero_std = [s["zero_std_groups"] for s in steady if s.get("zero_std_groups") is not None]
        table[impl] = dict(
            zero_std=statistics.mean(zero_std) if zero_std else None,
            median=med, lo=min(s["step"] for s in steady), hi=max(s["step"] for s in steady), first=first,
            tok_s=tok, rss=max(r["peak_rss_gb"] for r in runs), gpu=max(gpu) if gpu else None, n=len(steady),
        )
    gpu_col = any(t["gpu"] is not None for t in table.values())
    print("\n| | s/step median (range) | generation s | fwd+bwd+optim s | gen tokens/s | peak RSS GB |"
          + (" peak GPU GB |" if gpu_col else "") + " first step s | groups with one reward |")
    print("|---|---|---|---|---|---|" + ("---|" if gpu_col else "") + "---|---|")
    for impl, t in table.items():
        m = t["median"]
        gpu = f" {t['gpu']:.2f} |" if gpu_col else ""
        zero_std = "–" if t["zero_std"] is None else f"{t['zero_std']:.0%}"
        print(f"| {impl} (n={t['n']}) | {m['step']:.1f} ({t['lo']:.1f}–{t['hi']:.1f}) | {m['generation']:.1f} | "
              f"{m['train']:.1f} | {t['tok_s']:.0f} | {t['rss']:.2f} |{gpu} {', '.join(f'{x:.1f}' for x in t['first'])} | "
              f"{zero_std} |")
    for impl, peer in PEERS.items():
        if impl in table and peer in table:
            speed = table[peer]["median"]["step"] / table[impl]["median"]["step"]
            mem = table[impl]["rss"] / table[peer]["rss"]
            gpu = (f", {table[impl]['gpu'] / table[peer]['gpu']:.2f}× its peak GPU memory"
                   if table[impl]["gpu"] and table[peer]["gpu"] else "")
            print(f"{impl} vs {peer} (same precision): {speed:.2f}× the steps per second, {mem:.2f}× the peak RSS{gpu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="A/B alternations")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps per process (the first is warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--impls", nargs="+", default=None, choices=IMPLS,
                        help="default: all, without the bf16 workers where bf16 products are not native (an AVX2 CPU)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--model", default=None, help="a local model directory (default: the embedded SmolLM2)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="extra config override for the grove workers, e.g. --set host_allocator=system")
    parser.add_argument("--worker", choices=IMPLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        precision = "bf16" if "-bf16" in args.worker else "fp32"
        if args.worker.startswith("trl"):
            result = worker_trl(args.steps, args.threads, precision, args.device, args.model)
        else:
            extra = (*LEVERS.get(args.worker, ()), *args.overrides)
            result = worker_grove(args.worker, args.steps, args.threads, precision, args.device, args.model, extra)
        print("RESULT " + json.dumps(result), flush=True)
        return
    import torch

    from grove.infra.precision import native_bf16_products

    native_bf16 = native_bf16_products(args.device)
    print(f"device {args.device}" + (f" (PyTorch CPU capability {torch.backends.cpu.get_cpu_capability()})"
                                     if args.device == "cpu" else "") + f"; native bf16 products: {native_bf16}")
    if args.impls is None:  # bf16 without native products takes hours and measures a reference loop
        args.impls = [i for i in IMPLS if native_bf16 or "bf16" not in i]
        if not native_bf16:
            print("bf16 workers left out: bf16 products are not native here (name them with --impls to run them)")
    results = []
    for r in range(args.rounds):
        for impl in args.impls:
            cmd = [sys.executable, __file__, "--worker", impl, "--steps", str(args.steps), "--threads", str(args.threads),
                   "--device", args.device, *(["--model", args.model] if args.model else [])]
            cmd += [f"--set={override}" for override in args.overrides]
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode or line is None:
                sys.exit(f"{impl} worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            res = json.loads(line[len("RESULT "):])
            results.append(res)
            print(f"round {r + 1} {impl}: " + ", ".join(f"{s['step']:.1f}s" for s in res["steps"])
                  + f"; peak RSS {res['peak_rss_gb']:.2f} GB", flush=True)
    summarise(results)


if __name__ == "__main__":
    main()
