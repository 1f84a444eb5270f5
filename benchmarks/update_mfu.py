"""Model-FLOPs utilisation of the policy update: one GRPO update (forward, backward, AdamW) of a model shape on one
device, timed, against the matrix-product throughput the device reaches.

The batch is synthetic and of a GRPO step's shape: ``--prompts`` prompts of ``--prompt-tokens`` random tokens, each
with ``--samples`` completions of ``--response-tokens`` tokens, random advantages; the update is the trainer's
(``grove.pipeline.update.PolicyUpdate`` through ``ResponseLogprobModule`` with ``train.packed_attention``,
``--packed-attention``: ``auto`` is flex attention on CUDA), at ``train.precision`` (bf16: float32 weights under bfloat16 autocast) and
``train.micro_batch_size``. Model FLOPs per update: ``6 · (N_body · T_train + N_head · T_response)`` (forward 2 +
backward 4 per parameter and token; ``N_body`` the decoder's parameters without the embedding, ``N_head`` the
output projection, applied to response tokens only; ``T_train`` = each group's prompt once + the responses: the
packed forward's tokens). MFU is printed against the device's measured bf16 (or fp32) matrix product throughput
(an 8192³ product) and, on a known GPU, against its nominal dense peak. The first update (compilation of the flex
attention kernels, cuBLAS set-up) is reported apart from the median of the others.

    python benchmarks/update_mfu.py --device cuda --shape 0.5b
    python benchmarks/update_mfu.py --device cuda --shape 0.5b --packed-attention dense_mask   # no compilation
    python benchmarks/update_mfu.py --device cpu --shape 135m --prompts 2 --samples 2 --repeats 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rollout_engines import SHAPES, build_model  # noqa: E402

NOMINAL_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}  # dense bf16 tensor-core peaks


def synthetic_batch(prompts: int, samples: int, prompt_tokens: int, response_tokens: int, vocab: int):
    from grove.batch import RolloutBatch

    g = torch.Generator().manual_seed(0)
    rows = prompts * samples
    prompt = torch.randint(100, vocab, (prompts, prompt_tokens), generator=g).repeat_interleave(samples, 0)
    response = torch.randint(100, vocab, (rows, response_tokens), generator=g)
    ones = torch.ones_like(response)
    return RolloutBatch(
        prompt_ids=prompt, prompt_mask=torch.ones_like(prompt), response_ids=response, response_mask=ones,
        loss_mask=ones.clone(), old_logprobs=torch.full(response.shape, -10.0),
        rewards=torch.randn((rows, 1), generator=g), reward_names=("score",),
        group_index=torch.arange(prompts).repeat_interleave(samples), trajectory_index=torch.arange(rows),
        step_index=torch.zeros(rows, dtype=torch.long), truncated=torch.zeros(rows, dtype=torch.bool),
        advantages=torch.randn(rows, generator=g)[:, None].expand(rows, response_tokens).contiguous(),
    )


def matmul_tflops(device: torch.device, dtype: torch.dtype, size: int) -> float:
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(5):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e12


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    parser.add_argument("--model", default=None, help="a local model directory instead of a random shape")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=45)
    parser.add_argument("--response-tokens", type=int, default=64)
    parser.add_argument("--micro-batch-size", type=int, default=64)
    parser.add_argument("--packed-attention", choices=["auto", "flex", "dense_mask"], default="auto",
                        help="train.packed_attention (auto: flex attention on CUDA, compiled at the first update)")
    parser.add_argument("--repeats", type=int, default=3, help="updates after the first")
    parser.add_argument("--matmul-size", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import grove.resolve  # noqa: F401  (registers every built-in component)
    from grove.infra.precision import autocast
    from grove.models.logprob_module import ResponseLogprobModule
    from grove.pipeline.update import PolicyUpdate, UpdateSchedule
    from grove.pipeline.update_seam import UpdateContext
    from grove.resolve import load_config, resolve
    from grove.training.optim import build_optimizer

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model, _ = build_model(args.shape, args.model, torch.float32, device)  # float32 master weights
    model.requires_grad_(True)
    module = ResponseLogprobModule(model, args.packed_attention)
    cfg = load_config(None, [f"train.precision={args.precision}", f"train.micro_batch_size={args.micro_batch_size}",
                             "train.skip_zero_advantage=false"])
    parts = resolve(cfg, preflight_checks=False).components.loss
    optimizer, scheduler = build_optimizer(module, cfg.optim, 100)
    update = PolicyUpdate(UpdateContext(module, optimizer, scheduler), parts, UpdateSchedule(1, 1, args.micro_batch_size, 1.0))
    batch = synthetic_batch(args.prompts, args.samples, args.prompt_tokens, args.response_tokens,
                            model.config.vocab_size)
    seconds = []
    for _ in range(1 + args.repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast(args.precision, device):
            update.step(batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    embed = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight.numel()
    params = sum(p.numel() for p in model.parameters())
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    body = params - embed - (0 if tied else head)
    response = batch.num_samples * args.response_tokens
    train_tokens = args.prompts * args.prompt_tokens + response
    flops = 6 * (body * train_tokens + head * response)
    median = statistics.median(seconds[1:]) if len(seconds) > 1 else seconds[0]
    achieved = flops / median / 1e12
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    matmul = matmul_tflops(device, dtype, args.matmul_size if device.type == "cuda" else 1024)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    nominal = next((v for k, v in NOMINAL_BF16_TFLOPS.items() if k in name), None) if args.precision == "bf16" else None
    result = {
        "model": args.model or args.shape, "device": name, "precision": args.precision, "rows": batch.num_samples,
        "packed_attention": args.packed_attention,
        "train_tokens": train_tokens, "response_tokens": response, "body_params": body, "head_params": head,
        "first_update_s": seconds[0], "update_s": median, "model_tflops_per_s": achieved,
        "matmul_tflops_per_s": matmul, "mfu_vs_matmul": achieved / matmul,
        "mfu_vs_nominal": achieved / nominal if nominal else None,
        "peak_gpu_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None,
    }
    print(f"\n{result['model']} on {name}, {args.precision}: {batch.num_samples} rows, {train_tokens} trained "
          f"tokens ({response} response), micro-batch {args.micro_batch_size}, packed attention "
          f"{args.packed_attention}")
    print(f"first update {seconds[0]:.2f} s (compilation included), then median {median:.3f} s: "
          f"{achieved:.1f} model TFLOP/s = {100 * result['mfu_vs_matmul']:.1f} % of the measured {matmul:.0f} TFLOP/s "
          f"matrix product" + (f", {100 * result['mfu_vs_nominal']:.1f} % of the nominal {nominal:.0f}" if nominal
                               else ""))
    print("RESULT " + json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
