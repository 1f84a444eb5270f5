"""Generate ``docs/cli.md``, the reference of every ``grove`` command, from the command line itself.

    python scripts/cli_reference.py          # rewrite docs/cli.md
    python scripts/cli_reference.py --check  # exit 1 when docs/cli.md differs from what the commands say

Each command's help text, arguments and options come from the Typer app (:mod:`grove.cli`), so the page cannot
drift from the commands (``tests/test_docs_site.py`` runs the check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import typer

from grove.cli import app

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"

HEADER = """# Command line

Every `grove` command, its arguments and its options: generated from the commands themselves by
`scripts/cli_reference.py` (`make docs`; a test fails when this page drifts). `python -m grove ...` and
`torchrun ... -m grove ...` take the same commands.
"""


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    """``(full name, command)`` of every command under ``group``, in the app's order, groups expanded."""
    found = []
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        if hasattr(command, "commands"):  # a group of commands (``grove config``)
            found.extend(_commands(command, full))
        else:
            found.append((full, command))
    return found


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _parameter_rows(command: Any) -> list[str]:
    rows = []
    for param in command.params:
        if param.name == "help":
            continue
        if param.param_type_name == "argument":
            name = f"`{param.name.upper()}`"
            help_text = getattr(param, "help", None)
            default = "required" if param.required else ""
        else:
            name = ", ".join(f"`{opt}`" for opt in (*param.opts, *param.secondary_opts))
            help_text = param.help
            shown = param.default if not callable(param.default) else None
            empty = shown is None or shown is False or (isinstance(shown, (list, tuple)) and not shown)
            default = "" if empty else f"`{shown}`"
        rows.append(f"| {name} | {_cell(help_text)} | {default} |")
    return rows


def render() -> str:
    root = typer.main.get_command(app)  # the click command tree (typer carries its own click)
    parts = [HEADER]
    for name, command in _commands(root, "grove"):
        parts.append(f"\n## `{name}`\n\n{(command.help or '').strip()}\n")
        rows = _parameter_rows(command)
        if rows:
            parts.append("\n| argument or option | meaning | default |\n|---|---|---|\n" + "\n".join(rows) + "\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when docs/cli.md is not current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if PAGE.read_text() != text:
            print(f"{PAGE} is out of date: run python scripts/cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
