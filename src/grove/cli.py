"""The ``grove`` command line: train, sft, demos, eval, config show, plot, view, export."""

from __future__ import annotations

import gc
import json
import os
import shlex
import sys
import traceback
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grove.command_failures import (
    early_stop,
    output_dir_problem,
    unreported_write_failure,
    user_error_types,
    user_message,
)
from grove.config import ConfigError, GroveConfig, dump_config
from grove.evaluation.stats import describe_sampled
from grove.resolve import load_config
from grove.view.view_command import view as view_run

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Group-relative RL for language models.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect configurations.")
app.add_typer(config_app, name="config")
console = Console()
err = Console(stderr=True, soft_wrap=True)

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config key: --set train.steps=20 (repeatable)."),
]


def _fail(message: str, where: str = "", code: int = 2) -> NoReturn:
    """Print ``error: ...`` (the text verbatim, never read as rich markup) and exit with ``code`` (2: a mistake to
    fix; a stopped run has its own codes)."""
    err.print(f"[red]error:[/red] {escape(where + message)}", highlight=False)
    raise typer.Exit(code)


def _load(config: Path | None, overrides: list[str] | None) -> GroveConfig:
    try:
        return load_config(config, overrides or [])
    except ConfigError as exc:
        _fail(str(exc))


ResumeOption = Annotated[
    Path | None, typer.Option("--resume", help="Continue the run in this directory from its last checkpoint.")
]


@app.command()
def train(
    config: Annotated[Path, typer.Argument(help="YAML config file.")],
    set_: SetOption = None,
    resume: ResumeOption = None,
) -> None:
    """Train a policy with the configured algorithm, evaluating before and after."""
    from grove.training.trainer import Trainer  # whose start-up resolves user code before the model loads

    _run_training("train", Trainer, config, set_, resume)


@app.command()
def sft(
    config: Annotated[Path, typer.Argument(help="YAML config file with an `sft` section.")],
    set_: SetOption = None,
    resume: ResumeOption = None,
) -> None:
    """Supervised fine-tuning on the config's `sft.data` (the warm start before RL), evaluating before and after;
    writes RUN_DIR/model for `model.init_from`."""
    from grove.training.sft_trainer import SftTrainer

    _run_training("sft", SftTrainer, config, set_, resume)


def _run_training(command: str, trainer_class: type, config: Path, set_: list[str] | None, resume: Path | None) -> None:
    """Run a training command (``train`` or ``sft``) with its error handling, stop signals and summary."""
    overrides = list(set_ or [])
    if resume is not None:
        overrides.append(f"output_dir={json.dumps(str(resume))}")  # quoted: the path is a string, not YAML
    cfg = _load(config, overrides)
    from grove.distributed.world import init_world
    from grove.infra.write_failures import RunWriteError
    from grove.training.nonfinite_guard import NonFiniteTrainingError

    # besides the user's mistakes (a checkpoint or log that could not be written among them): a run that kept
    # producing NaN, whose message names the last good checkpoint
    user_errors = (*user_error_types(), NonFiniteTrainingError)
    resume_command = shlex.join(
        ["grove", command, str(config), "--resume", str(cfg.output_dir), *(a for o in set_ or [] for a in ("--set", o))]
    )
    world = init_world(cfg.distributed.timeout_seconds, cfg.distributed.device)  # one process without torchrun
    where = f"{world.label}: " if world.distributed else ""

    trainer = None

    def leave(exc: BaseException | None = None, together: bool = False) -> None:
        """Leave the process group with nothing distributed left alive: PyTorch aborts a rank at exit ("terminate
        called without an active exception") when a DDP or FSDP2 module or its optimizer outlives the group."""
        nonlocal trainer
        if world.distributed:
            trainer = None
            if exc is not None:  # the traceback's frames hold the trainer too
                traceback.clear_frames(exc.__traceback__)
            gc.collect()
        world.close(together)

    def fail(message: str, exc: BaseException | None = None) -> NoReturn:
        leave(exc)
        _fail(message, where)

    # a --resume directory that does not exist is not created here: the trainer says there is no run there
    probe = world.is_main and (resume is None or Path(cfg.output_dir).is_dir())
    problem = output_dir_problem(Path(cfg.output_dir)) if probe else None
    if problem is not None:
        fail(f"output_dir {cfg.output_dir!r} is not writable: {problem}; choose another with --set output_dir=...")
    try:
        trainer = trainer_class(cfg, Path(cfg.output_dir), resume=resume is not None, world=world)
        if trainer.resume_from is not None and world.is_main:
            err.print(f"resuming {cfg.output_dir} from {trainer.resume_from.name}")
        summary = trainer.run()
    except user_errors as exc:
        fail(user_message(exc), exc)
    except (KeyboardInterrupt, SystemExit) as exc:  # a second signal, a Ctrl-C outside the loop, user code exiting
        step = None if trainer is None else trainer.step
        leave(exc)
        message, code = early_stop(exc, step, Path(cfg.output_dir), resume_command)
        _fail(message, where, code)
    except Exception as exc:
        full = unreported_write_failure(exc, Path(cfg.output_dir))
        if full is not None:  # a write outside the run's own files (a cache, a library's file) met a full disk
            fail(full, exc)
        if world.distributed:  # say which rank failed, before the traceback torchrun collects
            err.print(f"[red]error:[/red] {escape(f'{where}{type(exc).__name__}: {exc}')}", highlight=False)
        raise
    leave(together=True)  # every rank finished (or stopped after the same step)
    if summary.stopped_by is not None:  # SIGTERM / Ctrl-C: stopped after a step, with a checkpoint
        import signal

        if world.is_main:
            err.print(
                f"{summary.stopped_by} received: stopped after step {summary.steps} with a checkpoint. Continue with:\n"
                f"  {resume_command}",
                markup=False, highlight=False,
            )
        raise typer.Exit(128 + signal.Signals[summary.stopped_by].value)
    if world.is_main:
        from grove.infra.plotting import plot_run

        try:
            plots = plot_run(summary.run_dir)
        except RunWriteError as exc:  # every step ran and is saved: the run is finished, without its pictures
            err.print(f"[yellow]warning:[/yellow] {escape(str(exc))}", highlight=False)
            plots = []
        _print_summary(summary.run_dir, plots)


def _print_summary(run_dir: Path, plots: list[Path]) -> None:
    import json

    data = json.loads((run_dir / "summary.json").read_text())
    evaluated = [label for label in ("before", "after") if data.get(label) and "accuracy" in data[label]]
    if evaluated:
        table = Table(title="held-out accuracy (greedy)")
        for col in ("", "accuracy", "correct / n", "95% CI"):
            table.add_column(col)
        for label in evaluated:
            e = data[label]
            table.add_row(
                f"{label} (step {e['step']})",
                f"{100 * e['accuracy']:.1f}%",
                f"{e['correct']}/{e['total']}",
                f"{100 * e['ci_low']:.1f}–{100 * e['ci_high']:.1f}%",
            )
        console.print(table)
    if len(evaluated) == 2:
        gain = 100 * (data["after"]["accuracy"] - data["before"]["accuracy"])
        console.print(f"change: {gain:+.1f} points")
    for label in evaluated:
        line = describe_sampled(data[label])
        if line:
            console.print(f"{label} (step {data[label]['step']}), {line}")
    losses = [(label, data[label]["held_out_loss"]) for label in ("before", "after")
              if data.get(label) and "held_out_loss" in data[label]]
    if losses:
        console.print("held-out loss: " + ", ".join(f"{label} {value:.4f}" for label, value in losses))
    if data.get("model"):
        console.print(f"model: {data['model']}  (start RL from it with --set model.init_from={run_dir})")
    shown = ", ".join(str(p) for p in plots) or "none written"
    console.print(f"run directory: {run_dir}  (plots: {shown})")


@app.command()
def demos(
    config: Annotated[Path, typer.Argument(help="YAML config with the `env` (or `task`) to demonstrate.")],
    out: Annotated[Path, typer.Option("--out", help="The demonstration file to write (JSONL).")],
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="Episodes to play (examples, for a task).")] = 100,
    noise: Annotated[
        float, typer.Option("--noise", min=0.0, max=1.0, help="Fraction of turns that take a random other admissible action.")
    ] = 0.0,
    keep: Annotated[str, typer.Option("--keep", help="'won': only the episodes that succeeded; 'all': every one.")] = "won",
    seed: Annotated[int, typer.Option("--seed", help="Seeds the order of the training tasks and the noise.")] = 0,
    set_: SetOption = None,
) -> None:
    """Expert demonstrations of the config's environment (its oracle) or task (its gold answers), on training tasks
    only, rendered exactly as the RL rollouts render them: the data for `grove sft`."""
    if keep not in ("won", "all"):
        _fail(f"--keep {keep!r}: choose 'won' or 'all'")
    cfg = _load(config, set_)
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoTokenizer

    from grove.demos import write_demonstrations
    from grove.models.pretrained import resolve_model_path
    from grove.rollout.engine import context_length

    try:
        path = resolve_model_path(cfg.model.name)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model_config = AutoConfig.from_pretrained(path, local_files_only=True)
        summary = write_demonstrations(
            cfg, tokenizer, out, episodes=episodes, noise=noise, keep=keep, seed=seed,
            model_context=context_length(SimpleNamespace(config=model_config), tokenizer),  # no weights needed
        )
    except (*user_error_types(), ValueError, OSError) as exc:
        _fail(user_message(exc))
    console.print(summary.describe())


@app.command("eval")
def eval_(
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model directory, checkpoint model/ dir, or 'smollm2-135m' (default: the config's)."),
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Task id (default: the config's task).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Config for the task and rewards, or the environment, and sampling.")
    ] = None,
    set_: SetOption = None,
    max_examples: Annotated[
        int | None, typer.Option("--max-examples", help="Evaluate at most N examples (held-out episodes for `env`).")
    ] = None,
    samples: Annotated[
        int | None,
        typer.Option(
            "--samples",
            help="Also sample N completions (episodes) per example at eval.temperature (default: rollout.temperature): "
            "sampled accuracy with its interval, and pass@k (sets eval.samples).",
        ),
    ] = None,
) -> None:
    """Greedy held-out accuracy (or, with an `env` section, success rate and mean turns), with a 95% interval;
    with --samples N also the accuracy of N sampled completions per example and pass@k."""
    overrides = list(set_ or [])
    if task is not None:
        overrides.append(f"task={{id: {task}}}")
    if max_examples is not None:
        overrides.append(f"eval.max_examples={max_examples}")
    if samples is not None:
        overrides.append(f"eval.samples={samples}")
    cfg = _load(config, overrides)

    import grove.builtin_components  # noqa: F401
    from grove.experience import SourceContext, build_experience_source
    from grove.infra.runtime import configure_runtime
    from grove.models.pretrained import load_policy
    from grove.rollout.hf_engine import TransformersEngine

    configure_runtime(**cfg.runtime_settings())
    _print_precision_warning(cfg.train.precision, False, "cpu")  # generation under the precision's autocast
    user_errors = user_error_types()
    try:
        if model is None:
            from grove.models.initial_weights import policy_source

            model = policy_source(cfg.model.name, cfg.model.init_from)
        policy, tokenizer = load_policy(model)
    except (FileNotFoundError, ValueError) as exc:  # ModelLoadError is a ValueError
        _fail(str(exc))
    engine = TransformersEngine(
        policy, tokenizer, reuse_prefixes=cfg.rollout.prefix_reuse, exact_top_logits=cfg.rollout.exact_top_logits
    )
    try:
        source = build_experience_source(SourceContext.for_evaluation(cfg, engine, tokenizer))
        result = source.evaluate()
    except user_errors as exc:
        _fail(user_message(exc))
    target = f"env {cfg.env.id}" if cfg.source_id == "environment" else cfg.task.id
    extra = "".join(f", {k} {v:.3g}" for k, v in result.extra.items() if k != "success_rate" and "/" not in k)
    console.print(f"{model} on {target}: {result.report}{extra}  ({result.seconds:.1f}s)")
    sampled = describe_sampled(result.extra)
    if sampled:
        console.print(sampled)
    _print_breakdowns(result.extra)
    objectives = [k.split("/")[1] for k in result.extra if k.startswith("objective/") and k.endswith("/n")]
    if objectives:
        from rich.table import Table

        table = Table("objective", "held-out mean", "samples it applies to", title="per objective")
        for name in objectives:
            mean = result.extra.get(f"objective/{name}")
            table.add_row(name, "–" if mean is None else f"{mean:.3f}", f"{result.extra[f'objective/{name}/n']:.0f}")
        console.print(table)


def _print_breakdowns(extra: dict[str, float]) -> None:
    """Tables of the nested evaluation metrics: one per evaluation set (held-out, then e.g. ``quiz/``), a row per
    metric, a column for "all" and for each ``<group>/<name>/`` breakdown (e.g. ``kb/tables/``). A key with an even
    number of parts starts with its evaluation set (``quiz/answer_accuracy``, ``quiz/kb/tables/answer_accuracy``)."""
    from rich.table import Table

    sets: dict[str, dict[str, dict[str, float]]] = {}
    for key, value in extra.items():
        parts = key.split("/")
        if parts[0] == "objective" or len(parts) == 1:
            continue
        eval_set = "held-out"
        if len(parts) % 2 == 0:
            eval_set, parts = parts[0], parts[1:]
        column = "all" if len(parts) == 1 else parts[-2]
        sets.setdefault(eval_set, {}).setdefault(column, {})[parts[-1]] = value
    if "held-out" in sets:
        sets["held-out"]["all"] = {k: v for k, v in extra.items() if "/" not in k}
    for eval_set, columns in sets.items():
        if eval_set == "held-out" and len(columns) < 2:
            continue
        columns = {"all": columns.pop("all", {}), **columns}
        metrics = list(dict.fromkeys(m for c in columns.values() for m in c))
        table = Table("metric", *columns, title=eval_set)
        for metric in metrics:
            table.add_row(metric, *("–" if c.get(metric) is None else f"{c[metric]:.3g}" for c in columns.values()))
        console.print(table)


@config_app.command("show")
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
    cfg = _load(config, set_)
    from grove.training.preflight import preflight

    try:
        preflight(cfg)
    except user_error_types() as exc:
        _fail(user_message(exc))
    if cfg.algorithm.preset:
        import yaml

        from grove.config.presets import PRESETS

        console.print(f"# preset {cfg.algorithm.preset!r} supplies (your own keys override it):", highlight=False)
        fragment = yaml.safe_dump(PRESETS[cfg.algorithm.preset].settings, sort_keys=False)
        console.print("".join(f"#   {line}\n" for line in fragment.splitlines()), markup=False, highlight=False)
    console.print(dump_config(cfg), markup=False, highlight=False)
    table = Table(title="derived batch quantities")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, value in cfg.derived().items():
        table.add_row(key, str(value))
    console.print(table)
    from grove.config.derived import generates_from_bf16_copy, zero_advantage_skip_blocker

    blocker = zero_advantage_skip_blocker(cfg)
    console.print(
        "the update leaves zero-advantage samples out (train.skip_zero_advantage)" if blocker is None
        else f"the update computes every sample: {blocker}", highlight=False,
    )
    _print_precision_warning(cfg.train.precision, generates_from_bf16_copy(cfg), _run_device(cfg))
    if memory:
        try:
            _print_memory_plan(cfg, processes)
        except user_error_types() as exc:
            _fail(user_message(exc))


def _run_device(cfg: GroveConfig) -> str:
    """The device type one rank of this config runs on (``distributed.device``, ``auto`` resolved here)."""
    from grove.distributed.world import uses_cuda

    return "cuda" if uses_cuda(cfg.distributed.device) else "cpu"


def _print_precision_warning(precision: str, bf16_copy: bool, device: str) -> None:
    """Warn where ``train.precision`` or a bf16 generation copy asks for bf16 products ``device`` lacks."""
    from grove.infra.precision import slow_bf16_warning

    warning = slow_bf16_warning(precision, bf16_copy, device)
    if warning is not None:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)


def _print_memory_plan(cfg: GroveConfig, processes: int = 1) -> None:
    import psutil
    import torch

    import grove.builtin_components  # noqa: F401
    from grove.config.derived import generates_from_bf16_copy, needs_reference_model
    from grove.infra.memory_plan import GiB, ModelDims, RunShape, estimate_peak_bytes, lora_parameter_count
    from grove.models.pretrained import resolve_model_path
    from grove.rollout.engine import encode_prompts
    from grove.rollout.prepacked_linear import prepacking_supported
    from grove.tasks.task import build_task

    if cfg.source_id == "environment":
        console.print("memory plan: not available for environment episodes (their sample count and lengths vary "
                      "from step to step); it covers single-turn completions")
        return
    path = resolve_model_path(cfg.model.name)
    tokenizer = _tokenizer(path)
    examples = list(build_task(cfg.task).train)[:256]
    prompt_tokens = max(
        len(ids)
        for ids in encode_prompts(
            tokenizer, [e.prompt for e in examples], system_prompt=cfg.rollout.system_prompt,
            use_chat_template=cfg.rollout.use_chat_template,
        )
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
        completions_per_prompt=t.completions_per_prompt,
        micro_batch_size=min(t.micro_batch_size, t.completions_per_step // t.mini_batches),
        shared_prefix=t.forward != "padded",
        reference_model=needs_reference_model(cfg) and lora is None,  # LoRA: the base with adapters disabled
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
    )
    parts = estimate_peak_bytes(dims, shape)
    per_rank = f", per rank of {processes} ({cfg.distributed.strategy})" if processes > 1 else ""
    table = Table(title=f"estimated peak memory (longest prompt {prompt_tokens} tokens{per_rank})")
    table.add_column("component")
    table.add_column("GiB", justify="right")
    for name, value in parts.items():
        table.add_row(name, f"{value / GiB:.2f}")
    console.print(table)
    available = psutil.virtual_memory().available
    if parts["total"] + GiB > available:
        from grove.infra.precision import native_bf16_products

        bf16 = "use train.precision: bf16, " if native_bf16_products(_run_device(cfg)) else ""  # slow without
        err.print(
            f"[yellow]warning:[/yellow] the run needs about {parts['total'] / GiB + 1:.1f} GiB (estimate + 1 GiB "
            f"runtime) but {available / GiB:.1f} GiB are available; lower train.micro_batch_size, {bf16}"
            "or shorten rollout.max_new_tokens"
        )


def _tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


@app.command()
def plot(run_dir: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """Write PNG curves (reward, accuracy, KL, entropy, length, clip fraction, grad norm) to RUN_DIR/plots."""
    from grove.infra.plotting import plot_run
    from grove.infra.write_failures import RunWriteError

    try:
        paths = plot_run(run_dir)
    except (FileNotFoundError, RunWriteError) as exc:
        _fail(str(exc))
    for p in paths:
        console.print(str(p))


app.command("view")(view_run)  # the command's body lives in grove/view/view_command.py


@app.command()
def export(
    checkpoint_dir: Annotated[Path, typer.Argument(help="A checkpoint directory, RUN/checkpoints/step-N.")],
    out_dir: Annotated[Path, typer.Argument(help="Where to write the model (must not exist, or be empty).")],
) -> None:
    """Write a checkpoint as a plain transformers model: LoRA adapters merged into their base model, a full
    checkpoint copied; loadable with AutoModelForCausalLM.from_pretrained, without grove or peft."""
    from rich.markup import escape

    from grove.training.checkpoint_export import export_checkpoint

    try:
        path = export_checkpoint(checkpoint_dir, out_dir)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    console.print(str(path), markup=False, highlight=False, soft_wrap=True)
    console.print(f"load it with AutoModelForCausalLM.from_pretrained({str(path)!r})", markup=False,
                  highlight=False, soft_wrap=True)


def main() -> None:
    # like pytest and uvicorn: user modules named in a config (``mypkg.rewards:fn``) import from here
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app()


if __name__ == "__main__":
    main()
