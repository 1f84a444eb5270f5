"""``grove config show``: the resolved config, the batch quantities it implies and a peak-memory estimate."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from grove.cli.terminal import SetOption, console, err, fail, print_precision_warning, resolve_for_command
from grove.command_failures import user_error_types, user_message

if TYPE_CHECKING:
    from grove.config import GroveConfig
    from grove.resolve import RunPlan

__all__ = ["config_show"]


def config_show(
    config: Annotated[Path | None, typer.Argument(help="YAML config file (omit for the defaults).")] = None,
    set_: SetOption = None,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Estimate peak memory (reads the model's config and tokenizer).")
    ] = True,
    processes: Annotated[
        int,
        typer.Option("--processes", min=1, help="Estimate per rank for a launch on N processes (distributed.strategy)."),
    ] = 1,
) -> None:
    """Print the resolved, validated config, the batch quantities it implies, and a peak-memory estimate; the
    rewards, a user environment and LoRA targets are resolved as `grove train` resolves them before the model loads."""
    plan = resolve_for_command(config, set_, "train")
    cfg = plan.cfg
    if cfg.algorithm.preset:
        import yaml

        from grove.config.presets import PRESETS

        console.print(f"# preset {cfg.algorithm.preset!r} supplies (your own keys override it):", highlight=False)
        fragment = yaml.safe_dump(PRESETS[cfg.algorithm.preset].settings, sort_keys=False)
        console.print("".join(f"#   {line}\n" for line in fragment.splitlines()), markup=False, highlight=False)
    from grove.config import dump_config

    console.print(dump_config(cfg), markup=False, highlight=False)
    table = Table(title="derived batch quantities")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, value in cfg.derived().items():
        table.add_row(key, str(value))
    console.print(table)
    from grove.config.derived import generates_from_bf16_copy

    blocker = plan.skip_zero_advantage_blocker
    console.print(
        "the update leaves zero-advantage samples out (train.skip_zero_advantage)" if blocker is None
        else f"the update computes every sample: {blocker}", highlight=False,
    )
    print_precision_warning(cfg.train.precision, generates_from_bf16_copy(cfg), _run_device(cfg))
    if memory:
        try:
            _print_memory_plan(plan, processes)
        except user_error_types() as exc:
            fail(user_message(exc))


def _run_device(cfg: GroveConfig) -> str:
    """The device type one rank of this config runs on (``distributed.device``, ``auto`` resolved here)."""
    from grove.distributed.world import uses_cuda

    return "cuda" if uses_cuda(cfg.distributed.device) else "cpu"




def _agent_context_tokens(cfg: GroveConfig, path) -> int:
    """The most tokens an agent's context may hold before its answer: the model's context (or, in conversations,
    env.max_context_tokens when smaller) less rollout.max_new_tokens (grove.experience.context_budget)."""
    import json

    config = json.loads((path / "config.json").read_text())
    limit = int(config.get("max_position_embeddings") or cfg.env.max_context_tokens)
    if cfg.env.prompt == "conversation":
        limit = min(limit, cfg.env.max_context_tokens)
    return max(1, limit - cfg.rollout.max_new_tokens)


def _print_memory_plan(plan: RunPlan, processes: int = 1) -> None:
    import psutil
    import torch

    from grove.config.derived import generates_from_bf16_copy
    from grove.infra.memory_plan import GiB, ModelDims, RunShape, estimate_peak_bytes, lora_parameter_count
    from grove.models.pretrained import resolve_model_path
    from grove.rollout.prepacked_linear import prepacking_supported
    from grove.rollout.prompt_encoding import encode_prompt_batch
    from grove.tasks.task import build_task

    cfg = plan.cfg
    path = resolve_model_path(cfg.model.name)
    if cfg.source_id == "environment":  # the worst case: every context at its limit
        prompt_tokens = _agent_context_tokens(cfg, path)
    else:
        tokenizer = _tokenizer(path)
        examples = list(build_task(cfg.task, entry=plan.entries.task.entry).train)[:256]
        prompt_tokens = max(
            len(ids)
            for ids in encode_prompt_batch(
                tokenizer, [e.prompt for e in examples], system_prompt=cfg.rollout.system_prompt,
                use_chat_template=cfg.rollout.use_chat_template,
            ).ids
        )
    t = cfg.train
    dims = ModelDims.from_model_dir(path)
    lora = cfg.model.lora
    try:
        lora_params = lora_parameter_count(dims, lora.r, lora.target_modules) if lora is not None else None
    except ValueError as exc:
        console.print(f"memory plan: not available: {exc}", markup=False, highlight=False)
        return
    shape = RunShape(
        prompt_tokens=prompt_tokens,
        max_new_tokens=cfg.rollout.max_new_tokens,
        prompts_per_step=t.prompts_per_step,
        group_size=t.completions_per_prompt,
        micro_batch_size=min(t.micro_batch_size, t.completions_per_step // t.mini_batches),
        shared_prefix=t.forward != "padded",
        reference_model=plan.model_needs.reference and lora is None,  # LoRA: the base with adapters disabled
        compute_bytes=2 if t.precision == "bf16" else 4,
        bf16_generation_copy=generates_from_bf16_copy(cfg),
        packed_generation_copy=cfg.rollout.prepacked_weights and _run_device(cfg) == "cpu"
        and prepacking_supported(getattr(torch, cfg.model.dtype), "cpu"),
        activation_checkpointing=t.activation_checkpointing,
        bf16_moments=cfg.optim.state_dtype == "bf16",
        logit_cache_bytes=int(t.logit_cache_mb * 2**20),
        lora_params=lora_params,
        processes=processes,
        strategy=cfg.distributed.strategy,
        reward_model_bytes=plan.reward_model_bytes,
    )
    parts = estimate_peak_bytes(dims, shape)
    per_rank = f", per rank of {processes} ({cfg.distributed.strategy})" if processes > 1 else ""
    what = (f"agent contexts at their limit of {prompt_tokens} tokens, the worst case" if cfg.source_id == "environment"
            else f"longest prompt {prompt_tokens} tokens")
    table = Table(title=f"estimated peak memory ({what}{per_rank})")
    table.add_column("component")
    table.add_column("GiB", justify="right")
    for name, value in parts.items():
        table.add_row(name, f"{value / GiB:.2f}")
    console.print(table)
    available = psutil.virtual_memory().available
    budget = cfg.train.micro_batch_tokens
    if budget is not None:
        from grove.training.micro_batch_budget import AUTO_SHARE

        cap = AUTO_SHARE * available if budget == "auto" else None
        console.print(
            "train.micro_batch_tokens: "
            + (f"auto: a micro-batch's activations are kept under about {cap / GiB:.1f} GiB (half the memory "
               "available now, measured again at each update); larger micro-batches are split"
               if cap is not None else f"{budget} tokens at most per micro-batch; larger micro-batches are split"),
            markup=False, highlight=False,
        )
    if parts["total"] + GiB > available:
        from grove.infra.precision import native_bf16_products

        bf16 = "use train.precision: bf16, " if native_bf16_products(_run_device(cfg)) else ""  # slow without
        err.print(
            f"[yellow]warning:[/yellow] the run needs about {parts['total'] / GiB + 1:.1f} GiB (estimate + 1 GiB "
            f"runtime) but {available / GiB:.1f} GiB are available; lower train.micro_batch_size, {bf16}"
            "or shorten rollout.max_new_tokens"
        )


def _tokenizer(path: Path):
    """The model's tokenizer (a vision-language model's with its processor attached, to count image tokens)."""
    import json

    from grove.models.pretrained import load_tokenizer

    return load_tokenizer(path, json.loads((path / "config.json").read_text(encoding="utf-8")))
