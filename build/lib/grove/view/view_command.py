"""The ``grove view`` command: write a run's report and print its path; ``--serve`` also serves the folder."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from grove.view.sample_pages import ReportLimits

DEFAULTS = ReportLimits()


def report_server(folder: Path, port: int):
    """An HTTP server of ``folder`` on ``127.0.0.1:PORT`` (0: a free port), not yet serving."""
    import functools
    import http.server

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
            pass

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(QuietHandler, directory=str(folder)))


class ServeError(RuntimeError):
    """The report cannot be served on the port asked for (in use, or not allowed); the message says which port and
    what to do."""


def _server(folder: Path, port: int):
    """:func:`report_server`, or a :class:`ServeError` naming the port and another one to try."""
    try:
        return report_server(folder, port)
    except OSError as exc:
        other = f"--port {port + 1}, or " if 0 < port < 65535 else ""
        if exc.errno == errno.EADDRINUSE:
            reason = f"port {port} on 127.0.0.1 is already in use (another grove view --serve, or another server)"
        else:
            reason = f"could not listen on port {port} of 127.0.0.1: {exc.strerror or exc}"
        raise ServeError(
            f"{reason}; serve on another with {other}--port 0 for any free port (the report is written: "
            f"{folder / 'index.html'})"
        ) from None


def serve_folder(folder: Path, port: int) -> None:
    """Serve ``folder`` on ``http://127.0.0.1:PORT/`` until Ctrl-C (the report needs no server; this is for a
    browser on another machine through a forwarded port, or one that will not open ``file://`` pages). Raises
    :class:`ServeError` when the port is taken or not allowed."""
    with _server(folder, port) as server:
        print(f"serving http://127.0.0.1:{server.server_address[1]}/index.html (Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def view(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (the output_dir of grove train or grove sft).")],
    out: Annotated[
        Path | None, typer.Option("--out", help="The report folder (default: RUN_DIR/view); replaced if it holds a report.")
    ] = None,
    compare: Annotated[
        Path | None, typer.Option("--compare", help="Another run: both on the same held-out items, side by side.")
    ] = None,
    serve: Annotated[bool, typer.Option("--serve", help="Also serve the report folder over HTTP on 127.0.0.1.")] = False,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port for --serve (0: any free port).")] = 8000,
    hide_paths: Annotated[
        bool, typer.Option("--hide-paths", help="Cut absolute paths (config, runs) to their last part: a report to share.")
    ] = False,
    max_steps: Annotated[
        int, typer.Option("--max-steps", min=1, help="Steps of samples kept, spread evenly (also held-out evaluations).")
    ] = DEFAULTS.max_steps,
    page_samples: Annotated[
        int, typer.Option("--page-samples", min=1, help="Samples per data page (one .js file, loaded on demand).")
    ] = DEFAULTS.page_samples,
    max_text_chars: Annotated[
        int, typer.Option("--max-text-chars", min=1, help="Characters kept of one prompt, completion or observation.")
    ] = DEFAULTS.max_text_chars,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", min=1, help="Tokens kept of one sample's token details.")
    ] = DEFAULTS.max_tokens,
) -> None:
    """Write a static HTML report of a run (curves, evaluations, samples and their tokens, agent trajectories,
    objectives; with --compare, two runs on the same held-out items) and print the path of its index.html."""
    from grove.view.report_builder import build_report
    from grove.view.run_contents import NotARunError
    from grove.view.site_writer import ReportFolderError

    err = Console(stderr=True, soft_wrap=True)
    limits = ReportLimits(
        max_steps=max_steps, page_samples=page_samples, max_text_chars=max_text_chars, max_tokens=max_tokens
    )
    try:
        index = build_report(run_dir, out, compare, limits, hide_paths=hide_paths)
    except (NotARunError, ReportFolderError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    except OSError as exc:
        where = out if out is not None else run_dir / "view"
        err.print(f"[red]error:[/red] {escape(f'could not write the report to {where}: {exc}; choose another --out')}",
                  highlight=False)
        raise typer.Exit(2) from None
    print(index)
    if serve:
        try:
            serve_folder(index.parent, port)
        except ServeError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(2) from None
