"""``grove view RUN_DIR``: a self-contained static HTML report of a run (curves, held-out evaluations, samples
with their tokens, agent trajectories, objectives, a comparison with another run), opened from disk.

``run_contents`` reads the run directory into typed records, ``sample_records`` shapes samples for the page,
``sample_pages`` spreads and pages them, ``run_comparison`` matches two runs' held-out items, ``report_data``
composes the report's data, ``site_writer`` writes the folder, ``report_builder`` ties them together and
``view_command`` is the command line. ``assets/`` holds the page's own HTML, CSS and JavaScript (no CDN)."""

from grove.view.report_builder import build_report
from grove.view.run_contents import NotARunError

__all__ = ["NotARunError", "build_report"]
