"""Whether a run's PNG plots are drawn: matplotlib is optional (``grove[plots]``), so the plotting module is
imported only once a run's setting asks for plots and the package is there."""

from __future__ import annotations

from pathlib import Path

from grove.optional_packages import MATPLOTLIB, importable, require, wanted

__all__ = ["draw_plots", "how_to_see_plots"]


def draw_plots(run_dir: Path, setting: bool | None = True) -> list[Path] | None:
    """Write ``run_dir``'s plots (:func:`grove.infra.plotting.plot_run`) and return their paths, or ``None`` when
    ``setting`` says not to draw them: ``true`` draws them and needs matplotlib
    (:class:`~grove.optional_packages.OptionalPackageMissing` otherwise), unset draws them where it is installed,
    ``false`` never."""
    if not wanted(setting, MATPLOTLIB):
        return None
    require(MATPLOTLIB, f"plotting {run_dir}")
    from grove.infra.plotting import plot_run

    return plot_run(run_dir)


def how_to_see_plots(run_dir: Path) -> str:
    """The command that draws ``run_dir``'s plots later (and, without matplotlib, how to install it first)."""
    if importable(MATPLOTLIB.module):
        return f"grove plot {run_dir}"
    return f"grove view {run_dir}; PNG plots need {MATPLOTLIB.install}, then grove plot {run_dir}"
