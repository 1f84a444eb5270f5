"""The ``grove`` command line: train, sft, rm, demos, eval, config show, config components, plot, view, export,
compose-vlm.

Each command's body lives in a module of its own here (``grove view``'s in :mod:`grove.view.view_command`); this
module builds the app from them.
"""

from __future__ import annotations

import os
import sys

import typer

from grove.cli.components_command import components
from grove.cli.config_show import config_show
from grove.cli.eval_command import eval_
from grove.cli.model_commands import compose_vlm
from grove.cli.run_files_commands import demos, export, plot
from grove.cli.training_commands import rm, sft, train
from grove.view.view_command import view as view_run

__all__ = ["app", "main"]

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Group-relative RL for language models.")
config_app = typer.Typer(no_args_is_help=True, help="Inspect configurations.")
app.add_typer(config_app, name="config")
app.command()(train)
app.command()(sft)
app.command()(rm)
app.command()(demos)
app.command("eval")(eval_)
config_app.command("show")(config_show)
config_app.command("components")(components)
app.command()(plot)
app.command("view")(view_run)
app.command()(export)
app.command("compose-vlm")(compose_vlm)


def main() -> None:
    # the console shows grove's own progress and results: no progress bars of the Hugging Face libraries (loading
    # and writing weights, datasets), set before any of them is imported; a user's setting is kept
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # like pytest and uvicorn: user modules named in a config (``mypkg.rewards:fn``) import from here
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    app()
