"""What every ``grove`` command shares: the consoles, the ``error:`` exit, loading the config, the common options.

The command modules import torch, transformers and the components only inside the commands that use them, so
``grove --help`` and a mistyped command answer at once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from grove.config import GroveConfig
    from grove.resolve import RunKind, RunPlan

__all__ = [
    "ResumeOption", "SetOption", "console", "err", "fail", "load_for_command", "print_precision_warning",
    "read_for_command", "resolve_for_command",
]

console = Console()
err = Console(stderr=True, soft_wrap=True)

SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Override a config key: --set train.steps=20 (repeatable)."),
]

ResumeOption = Annotated[
    Path | None, typer.Option("--resume", help="Continue the run in this directory from its last checkpoint.")
]


def fail(message: str, where: str = "", code: int = 2) -> NoReturn:
    """Print ``error: ...`` (the text verbatim, never read as rich markup) and exit with ``code`` (2: a mistake to
    fix; a stopped run has its own codes)."""
    err.print(f"[red]error:[/red] {escape(where + message)}", highlight=False)
    raise typer.Exit(code)


def load_for_command(config: Path | None, overrides: list[str] | None) -> GroveConfig:
    """The config a command runs with, checked by the front door (without resolving user code); a mistake in it is
    an ``error:`` exit."""
    from grove.config import ConfigError
    from grove.resolve import load_config  # torch and every component: imported by the commands that run

    try:
        return load_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))


def read_for_command(config: Path | None, overrides: list[str] | None) -> GroveConfig:
    """The config as its file and ``--set`` say (the schema only: the front door checks the rest); a mistake in it
    is an ``error:`` exit."""
    from grove.config import ConfigError, read_config

    try:
        return read_config(config, overrides or [])
    except ConfigError as exc:
        fail(str(exc))


def resolve_for_command(config: Path | None, overrides: list[str] | None, kind: RunKind) -> RunPlan:
    """The config resolved by the front door for a run of ``kind`` in one process (:func:`grove.resolve.resolve`,
    user code and model files included); a mistake is an ``error:`` exit."""
    from grove.command_failures import user_error_types, user_message
    from grove.resolve import resolve

    cfg = read_for_command(config, overrides)
    try:
        return resolve(cfg, kind)
    except user_error_types() as exc:
        fail(user_message(exc))


def print_precision_warning(precision: str, bf16_copy: bool, device: str) -> None:
    """Warn where ``train.precision`` or a bf16 generation copy asks for bf16 products ``device`` lacks."""
    from grove.infra.precision import slow_bf16_warning

    warning = slow_bf16_warning(precision, bf16_copy, device)
    if warning is not None:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
