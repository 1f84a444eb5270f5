"""The policy update of one real step at several micro-batch sizes, with and without activation checkpointing
(results in docs/benchmarks.md).

    python benchmarks/micro_batch_size.py --set train.precision=bf16 --set optim.state_dtype=bf16 \\
        --set train.compile=true --variants 8 64+ckpt 64 32+ckpt
    python benchmarks/micro_batch_size.py --set train.compile=true --variants 8 64+ckpt 32+ckpt 16+ckpt

The vs_trl work (``benchmarks/step_memory.py``'s settings: SmolLM2-135M, 8 prompts × 8 completions, ≤ 64 new
tokens, T = 1) runs two trainer steps; the second step's rollout batch, weights and optimizer state are then kept,
and each variant (``M`` completions per micro-batch, ``+ckpt`` with activation checkpointing) runs that same
update from them, alternated ``--repeats`` times in this one process. Printed per run: seconds, loss and gradient
norm (equal across variants up to float rounding: only the micro-batch boundaries change); then the medians and
the speed-up over the first variant. The first round holds any compilation of new shapes (``train.compile``).
Peak memory is not comparable inside one process (the heap keeps its high-water mark): compare it with
``benchmarks/step_memory.py`` in separate processes.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from step_memory import WORK

from grove.pipeline.update import PolicyUpdate
from grove.resolve import load_config
from grove.training.policy_models import set_activation_checkpointing
from grove.training.trainer import Trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["8", "64+ckpt"], metavar="M[+ckpt]")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    variants = [(v, int(v.split("+")[0]), v.endswith("+ckpt")) for v in args.variants]
    out = Path(tempfile.mkdtemp(prefix="micro_batch_size_"))
    trainer = Trainer(load_config("examples/arithmetic.yaml", [f"output_dir={out}", *WORK, *args.overrides]), out)
    step, captured = PolicyUpdate.step, {}

    def keep_arguments(self, batch, coefficients, tokens):
        context = self.context
        captured.update(update=self, batch=batch, coefficients=coefficients, tokens=tokens,
                        weights={k: v.clone() for k, v in context.model.state_dict().items()},
                        optimizer=copy.deepcopy(context.optimizer.state_dict()),
                        scheduler=copy.deepcopy(context.scheduler.state_dict()))
        return step(self, batch, coefficients, tokens)

    PolicyUpdate.step = keep_arguments
    for _ in range(2):  # the second step's update: AdamW's state exists, as in a run's steady state
        trainer.step += 1
        trainer.train_step()
    PolicyUpdate.step = step
    captured_update, batch = captured["update"], captured["batch"]
    context = captured_update.context
    model, optimizer, scheduler = context.model, context.optimizer, context.scheduler
    print(f"batch: {batch.num_samples} completions, {int(batch.response_mask.sum())} response tokens")
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    for _ in range(args.repeats):
        for name, size, checkpointing in variants:
            set_activation_checkpointing(trainer.models.causal_lm, checkpointing)
            model.load_state_dict(captured["weights"])
            optimizer.load_state_dict(captured["optimizer"])
            scheduler.load_state_dict(captured["scheduler"])
            start = time.perf_counter()
            schedule = dataclasses.replace(captured_update.schedule, micro_batch_size=size)
            update = PolicyUpdate(context, captured_update.loss, schedule)
            metrics = update.step(batch, captured["coefficients"], captured["tokens"]).metrics
            times[name].append(time.perf_counter() - start)
            print(f"  {name:10s} {times[name][-1]:6.2f} s  loss {metrics['loss']:+.6f}  grad norm "
                  f"{metrics['grad_norm']:.6f}", flush=True)
    base = statistics.median(times[variants[0][0]])
    print(f"\n| micro-batch | median s | range | speed-up vs {variants[0][0]} |\n|---|---|---|---|")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"| {name} | {med:.2f} | {min(values):.2f}–{max(values):.2f} | {base / med:.2f}× |")


if __name__ == "__main__":
    main()
