"""Resident memory (RSS) through two training steps, per phase: generation, update (results in docs/benchmarks.md).

    python benchmarks/step_memory.py --set train.precision=bf16
    python benchmarks/step_memory.py --set train.precision=bf16 --set optim.state_dtype=bf16
    python benchmarks/step_memory.py --set train.precision=bf16 --set train.activation_checkpointing=true
    python benchmarks/step_memory.py --steps 9 --set train.precision=bf16 --set mkldnn_lru_cache_entries=null
    python benchmarks/step_memory.py --steps 6 --set train.precision=bf16 --set onednn_primitive_cache_entries=null

The vs_trl work (SmolLM2-135M, 8 prompts × 8 completions, ≤ 64 new tokens, T = 1), ``--steps`` steps (2 by default)
in one process; RSS is sampled every 20 ms by a thread, and each phase's maximum and starting RSS are printed with
the step's response tokens and phase times, and after each step the heap in use (what a cache that grows over a run
shows up in). The second step is the steady state of AdamW's state (it exists from the first); oneDNN's operator
caches fill over the first several steps (``mkldnn_lru_cache_entries``, ``onednn_primitive_cache_entries``).

With glibc, each sample also reads ``mallinfo2``: the bytes the main heap has handed out (``in use``) and its size
(``heap``). Their gap at the peak is memory the allocator holds free but resident (fragmentation between
micro-batches); RSS beyond ``heap`` is the model's file mapping, libraries and Python's own arenas.
"""

from __future__ import annotations

import argparse
import ctypes
import resource
import tempfile
import threading
import time
from pathlib import Path

import psutil

from grove.pipeline.update import PolicyUpdate
from grove.resolve import load_config
from grove.training.trainer import Trainer

WORK = [
    "threads=2", "task.prompt_template=What is {question}? Answer with just the number.",
    "train.prompts_per_step=8", "train.completions_per_prompt=8", "train.steps=2", "rollout.max_new_tokens=64",
    "rollout.temperature=1.0", "optim.lr=1e-6", "algorithm={preset: grpo}", "algorithm.kl.coef=0.0",
    "algorithm.aggregation=token_mean", "logging.tensorboard=false", "logging.progress=false",
]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_reader():
    """``() -> (in use, heap size)`` in bytes from glibc's ``mallinfo2`` (main arena plus mmapped chunks), or
    ``None`` where the C library has none."""
    try:
        libc = ctypes.CDLL(None)
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2

    def read() -> tuple[int, int]:
        info = mallinfo2()
        return info.uordblks + info.hblkhd, info.arena + info.hblkhd

    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    process, samples, marks = psutil.Process(), [], []
    heap = heap_reader() or (lambda: (0, 0))

    def reading() -> tuple[float, int, int, int]:
        return (time.perf_counter(), process.memory_info().rss, *heap())

    def sample() -> None:
        while True:
            samples.append(reading())
            time.sleep(0.02)

    def mark(name: str) -> None:  # a phase boundary, with an RSS reading of its own (short phases get one too)
        now = reading()
        marks.append((name, now[0]))
        samples.append(now)

    threading.Thread(target=sample, daemon=True).start()
    out = Path(tempfile.mkdtemp(prefix="step_memory_"))
    work = [*WORK, f"train.steps={args.steps}"]
    trainer = Trainer(load_config("examples/arithmetic.yaml", [f"output_dir={out}", *work, *args.overrides]), out)
    update = PolicyUpdate.step

    def timed_update(*a, **kw):
        mark(f"step {trainer.step} update")
        result = update(*a, **kw)
        mark(f"step {trainer.step} after the update")
        return result

    PolicyUpdate.step = timed_update
    for _ in range(args.steps):
        trainer.step += 1
        mark(f"step {trainer.step} generation")
        metrics = trainer.train_step()
        print(f"step {trainer.step}: {metrics['generated_tokens']:.0f} response tokens, generation "
              f"{metrics['rollout_seconds']:.1f} s, update {metrics['train_seconds']:.1f} s, heap in use after "
              f"{heap()[0] / 1e9:.2f} GB, RSS {process.memory_info().rss / 1e9:.2f} GB", flush=True)
    mark("end")
    print("\n| phase | seconds | max RSS GB | RSS at start GB | max heap in use GB | max heap GB |\n|---|---|---|---|---|---|")
    for (name, t0), (_, t1) in zip(marks, marks[1:], strict=False):
        phase = [s for s in list(samples) if t0 <= s[0] < t1]
        if phase:
            print(f"| {name} | {t1 - t0:.1f} | {max(s[1] for s in phase) / 1e9:.2f} | {phase[0][1] / 1e9:.2f} | "
                  f"{max(s[2] for s in phase) / 1e9:.2f} | {max(s[3] for s in phase) / 1e9:.2f} |")
    print(f"\npeak RSS (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GiB")


if __name__ == "__main__":
    main()
