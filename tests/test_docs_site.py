"""The documentation site builds strictly (mkdocs --strict: a broken link or anchor, a page left out of the
navigation, an API reference that does not resolve, all fail) and the generated command reference is current."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_site_builds_strictly(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    api = (tmp_path / "site" / "python-api" / "index.html").read_text()
    assert "Trainer" in api and "load_config" in api  # the reference was generated from the code


def test_the_command_reference_is_current():
    done = subprocess.run([sys.executable, "scripts/cli_reference.py", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
