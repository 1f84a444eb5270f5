"""``make test`` and ``make demo`` install the versions the suite passed with: ``constraints.txt`` pins every package
grove (with its ``dev`` extra) brings in, at the version installed here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_packages_are_the_pinned_ones():
    done = subprocess.run([sys.executable, "scripts/update_constraints.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (
        f"{done.stderr}the environment differs from constraints.txt: reinstall with make install, or, after a "
        "deliberate upgrade that passes the suite, run python scripts/update_constraints.py"
    )


def test_the_makefile_installs_with_the_constraints():
    assert '-e ".[dev,hubs]" -c constraints.txt' in (ROOT / "Makefile").read_text()
