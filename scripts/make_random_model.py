"""Write a complete transformers model directory with SmolLM2-135M-Instruct's architecture and tokenizer but
randomly initialised weights (seeded), so grove can load it offline as ``--set model.name=<out_dir>``.

Usage:  python scripts/make_random_model.py OUT_DIR [--dtype fp32|bf16] [--seed 0] [--src DIR]

For speed measurements on a machine the embedded weights cannot travel to (e.g. a GPU machine: docs/benchmarks.md):
the timings of a step do not depend on the weights' values (random weights rarely sample EOS, so completions run to
``max_new_tokens``). ``--src`` holds config.json, generation_config.json, tokenizer.json,
tokenizer_config.json and chat_template.jinja (weights are not read); default: the embedded SmolLM2 directory
(``grove.models.pretrained.resolve_model_path("smollm2-135m")``), so copy those five files along to a machine
without it.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="dtype of the saved weights")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--src", type=Path, default=None, help="config + tokenizer directory")
    args = parser.parse_args()
    if args.src is None:
        from grove.models.pretrained import resolve_model_path

        args.src = Path(resolve_model_path("smollm2-135m"))

    t0 = time.perf_counter()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.manual_seed(args.seed)
    config = AutoConfig.from_pretrained(args.src, local_files_only=True)
    model = AutoModelForCausalLM.from_config(config)  # random init (float32), seeded above
    model = model.to(dtype).eval()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out_dir)
    for name in TOKENIZER_FILES:
        shutil.copy2(args.src / name, args.out_dir / name)
    if not (args.out_dir / "generation_config.json").is_file():
        shutil.copy2(args.src / "generation_config.json", args.out_dir / "generation_config.json")
    n = sum(p.numel() for p in model.parameters())
    files = ", ".join(sorted(p.name for p in args.out_dir.iterdir()))
    print(
        f"wrote {args.out_dir}: {n / 1e6:.1f}M parameters, {args.dtype}, seed {args.seed}, "
        f"{time.perf_counter() - t0:.1f}s ({files})"
    )


if __name__ == "__main__":
    main()
