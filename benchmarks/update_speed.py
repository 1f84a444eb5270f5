"""Time the policy update (forward + backward + AdamW) of one GRPO step, per training-forward variant.

One rollout batch of the demo's shape (8 prompts × 8 completions of SmolLM2-135M-Instruct on
two-digit addition, T = 0.5, ≤ 32 new tokens) is generated once; each variant then runs the same
update from the same weights, alternating A/B/A/B in this one process; medians and ratios to the
first variant are printed.

    python benchmarks/update_speed.py --repeats 3 --variants padded-fp32 shared-fp32 packed-fp32 packed-bf16

Config overrides (``--set``) reach the update (e.g. ``train.logit_cache_mb=0``) and the process
(``host_allocator=system``, ``train.compile=true``: the allocator policy and the compiled layers are
process-wide, so compare them across two runs; the first update then holds the compilation).

``--profile N`` runs each variant's last update under ``torch.profiler`` and prints its ``N`` most expensive operators
by self CPU time (where an update's time goes beyond its matrix products; the profiler's own overhead inflates small
operators, so time the lever itself before keeping it).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

import grove.resolve  # noqa: F401  (registers every built-in component)
from grove.experience.completion_collection import ExperienceSettings, collect_scored
from grove.experience.task_sampler import TaskSampler
from grove.infra.precision import autocast
from grove.infra.runtime import configure_runtime
from grove.models.compiled_layers import compile_decoder_layers
from grove.models.pretrained import load_policy
from grove.pipeline.credit import CreditAssignment
from grove.pipeline.update import PolicyUpdate, UpdateSchedule
from grove.pipeline.update_seam import UpdateContext
from grove.registry import ADVANTAGE_ESTIMATORS
from grove.resolve import load_config, resolve
from grove.rollout.engine import SamplingParams
from grove.rollout.hf_engine import TransformersEngine
from grove.rollout.prompt_encoding import encode_prompt_batch
from grove.tasks.task import build_task
from grove.training.optim import build_optimizer

LAYOUTS = {"padded": "padded", "shared": "shared_prefix", "packed": "packed"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="examples/arithmetic.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["padded-fp32", "shared-fp32", "packed-fp32", "packed-bf16"],
                        help="LAYOUT-PRECISION with LAYOUT in padded|shared|packed and PRECISION in fp32|bf16")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. --set rollout.temperature=1.0 --set rollout.max_new_tokens=64")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile each variant's last update and print its N most expensive operators")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    configure_runtime(**cfg.runtime_settings(args.threads))
    model, tokenizer = load_policy(cfg.model.name)
    if cfg.train.compile:
        compile_decoder_layers(model)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    task = build_task(cfg.task)
    sampler = TaskSampler(len(task.train), cfg.seed)

    def draw(count):
        examples = [task.train[i] for i in sampler.next(count)]
        return examples, encode_prompt_batch(tokenizer, [e.prompt for e in examples], system_prompt=None)

    settings = ExperienceSettings(
        groups=cfg.train.prompts_per_step,
        group_size=cfg.train.completions_per_prompt,
        sampling=SamplingParams(temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens),
        rewards=list(resolve(cfg).rewards),
    )
    credit = CreditAssignment(
        advantage_fn=ADVANTAGE_ESTIMATORS.get("grpo"),
        advantage_params=ADVANTAGE_ESTIMATORS.validate_params("grpo", {}),
        combiner=settings.combiner,
        combiner_params=settings.combiner_params,
    )
    engine = TransformersEngine(model, tokenizer)
    exp = credit(collect_scored(engine, draw, settings, torch.Generator().manual_seed(0), step=1))
    batch = exp.batch
    prompt_tokens = int(batch.prompt_mask.sum())
    response_tokens = int(batch.response_mask.sum())
    print(f"batch: {batch.num_samples} completions, {prompt_tokens} prompt + {response_tokens} response tokens")

    times: dict[str, list[float]] = {v: [] for v in args.variants}
    profiles: dict[str, str] = {}
    for repeat in range(args.repeats):
        for variant in args.variants:
            layout, precision = variant.split("-")
            parts = resolve(cfg, preflight_checks=False).components.loss
            parts = type(parts)(**{**parts.__dict__, "forward": LAYOUTS[layout], "precision": precision})
            model.load_state_dict(initial)
            optimizer, scheduler = build_optimizer(model, cfg.optim, 10)
            update = PolicyUpdate(
                UpdateContext(model, optimizer, scheduler), parts, UpdateSchedule(1, 1, cfg.train.micro_batch_size, 1.0)
            )
            profiling = args.profile > 0 and repeat == args.repeats - 1
            profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if profiling else None
            start = time.perf_counter()
            with autocast("fp32"), profiler or contextlib.nullcontext():
                metrics = update.step(batch).metrics
            times[variant].append(time.perf_counter() - start)
            if profiler is not None:
                profiles[variant] = profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile)
            print(f"  {variant:12s} {times[variant][-1]:6.2f}s  loss {metrics['loss']:+.5f}  "
                  f"mismatch {metrics['logprob_mismatch_max']:.1e}", flush=True)
    base = statistics.median(times[args.variants[0]])
    print("\n| variant | median s | range | speed-up vs " + args.variants[0] + " |")
    print("|---|---|---|---|")
    for variant, values in times.items():
        med = statistics.median(values)
        print(f"| {variant} | {med:.2f} | {min(values):.2f}–{max(values):.2f} | {base / med:.2f}× |")
    for variant, table in profiles.items():
        print(f"\n{variant}, the last update under the profiler:\n{table}")


if __name__ == "__main__":
    main()
