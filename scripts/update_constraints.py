"""Write ``constraints.txt``: the exact version of every package ``pip install -e ".[dev,all]"`` brings in, as installed
in this environment, so ``make demo`` and ``make test`` install what the test suite passed with.

    python scripts/update_constraints.py           # rewrite constraints.txt from the installed packages
    python scripts/update_constraints.py --check   # exit 1 when an installed version differs from its pin

``pyproject.toml`` keeps the version ranges grove supports, for library users; the Makefile installs with
``-c constraints.txt``. Rerun this after a dependency change once the suite passes, and commit both files. The
packages are grove's requirements and the ``dev`` and ``hubs`` extras', followed through their own requirements (the markers
of this Python and platform); torch is pinned by the Makefile itself (its CPU build).
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
HEADER = (
    "# The exact versions the test suite passed with (scripts/update_constraints.py writes this file; the Makefile\n"
    "# installs with -c constraints.txt). Version ranges for library users are in pyproject.toml.\n"
)
# grove itself; torch: the Makefile installs its CPU build by exact version; openenv-core: installed without its
# dependencies by the Makefile, at the version it names
LEFT_OUT = {"grove", "torch", "openenv-core"}


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras or {""})


def closure() -> dict[str, str]:
    """``{name: installed version}`` of grove's requirements (with ``dev`` and ``hubs``), followed recursively."""
    found: dict[str, str] = {}
    queue: list[tuple[str, set[str]]] = [("grove", {"dev", "hubs"})]
    while queue:
        name, extras = queue.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement not installed here (another platform's): nothing to pin
        for text in dist.requires or []:
            requirement = Requirement(text)
            if not _applies(requirement, extras | {""}):
                continue
            key = _name(requirement.name)
            if key in found or key in LEFT_OUT:
                continue
            try:
                found[key] = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                continue
            queue.append((requirement.name, set(requirement.extras)))
    return dict(sorted(found.items()))


def render(pins: dict[str, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in pins.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when an installed version differs from its pin")
    args = parser.parse_args(argv)
    pins = closure()
    if args.check:
        written = dict(line.split("==") for line in CONSTRAINTS.read_text().split("\n") if "==" in line)
        drift = {k: (written.get(k), v) for k, v in pins.items() if written.get(k) != v}
        for name, (pinned, installed) in drift.items():
            print(f"{name}: constraints.txt pins {pinned}, installed {installed}", file=sys.stderr)
        return 1 if drift else 0
    CONSTRAINTS.write_text(render(pins))
    print(f"{CONSTRAINTS}: {len(pins)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
