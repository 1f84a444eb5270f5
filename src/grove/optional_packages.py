"""Packages the core uses where they are installed and goes without elsewhere: TensorBoard event files
(``grove[tensorboard]``), PNG plots (``grove[plots]``, matplotlib) and the images of a vision-language policy's
prompts (``grove[vision]``, Pillow). A run of a core-only install writes its
``metrics.jsonl``, ``eval.jsonl`` and samples as always, which ``grove view`` reads without either package.

Each setting that uses one reads ``true`` (required: the config check names the missing package and its extra),
``false`` (never) or unset (where installed), as :func:`wanted` resolves it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MATPLOTLIB", "PILLOW", "TENSORBOARD", "OptionalPackage", "OptionalPackageMissing", "importable", "missing_message", "require",
    "wanted",
]


@dataclass(frozen=True)
class OptionalPackage:
    """A package the core uses when installed: its top-level module, the extra that installs it and what it writes."""

    module: str
    extra: str
    writes: str

    @property
    def install(self) -> str:
        return f"pip install 'grove[{self.extra}]' (or 'grove[all]')"


TENSORBOARD = OptionalPackage("tensorboard", "tensorboard", "TensorBoard event files")
MATPLOTLIB = OptionalPackage("matplotlib", "plots", "PNG plots")
PILLOW = OptionalPackage("PIL", "vision", "reading images")


class OptionalPackageMissing(ValueError):
    """Something asked for explicitly needs a package that is not installed; the message names it and the extra."""


def importable(module: str) -> bool:
    """Whether the top-level ``module`` can be imported (found on the path; not imported here)."""
    import importlib.util
    import sys

    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_message(package: OptionalPackage, what: str) -> str:
    """``what`` needs ``package``, which is not installed: the line that says so and how to install it."""
    return (f"{what} needs the {package.module} package for {package.writes}, which is not installed: "
            f"{package.install}")


def require(package: OptionalPackage, what: str) -> None:
    """:class:`OptionalPackageMissing` naming ``what`` and the extra when ``package`` is not installed."""
    if not importable(package.module):
        raise OptionalPackageMissing(missing_message(package, what))


def wanted(setting: bool | None, package: OptionalPackage) -> bool:
    """A setting of ``true``, ``false`` or unset (``None``: where ``package`` is installed) resolved here."""
    return importable(package.module) if setting is None else setting
