"""Loading a Prime Intellect verifiers taskset or environment (verifiers 0.4.0, ``verifiers.v1``), shared by the
``verifiers`` task, the ``verifiers_rubric`` reward and the ``verifiers`` environment.

``environment`` is a ``"package.module:function"`` path, called with ``kwargs`` and returning a ``vf.Taskset`` or a
``vf.Env``, or an installed taskset id, which verifiers loads itself
(``vf.load_environment(vf.resolve_env_config({"taskset": {"id": ..., **kwargs}}))``). verifiers is imported on first
use only, so importing grove does not import it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from grove.registry import import_callable

__all__ = ["INSTALL_HINT", "import_verifiers", "load_verifiers"]

INSTALL_HINT = "pip install verifiers==0.4.0"


def import_verifiers(user: str) -> ModuleType:
    """``verifiers.v1``; an ``ImportError`` naming ``user`` (what needs it) and the install command."""
    try:
        import verifiers.v1 as vf
    except ImportError as exc:
        raise ImportError(f"{user} needs Prime Intellect's verifiers package with its 0.4.0 API (verifiers.v1): "
                          f"{INSTALL_HINT} ({exc})") from exc
    return vf


def load_verifiers(
    environment: str, kwargs: dict[str, Any], where: str, error: type[Exception] = ValueError
) -> tuple[Any, Any]:
    """``(Env or None, Taskset)`` that ``environment`` names, built with ``kwargs``; ``error`` naming
    ``<where>.environment`` or ``<where>.kwargs`` when it cannot be loaded."""
    vf = import_verifiers(f"the verifiers {where} setting")
    if ":" in environment:
        factory = import_callable(environment, f"verifiers environment ({where}.environment)", error)
        try:
            made = factory(**kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the user's factory, reported with its kwargs
            raise error(f"{where}.environment {environment!r} raised {type(exc).__name__}: {exc} "
                        f"(called with {where}.kwargs {kwargs})") from exc
    else:
        try:
            made = vf.load_environment(vf.resolve_env_config({"taskset": {"id": environment, **kwargs}}))
        except ModuleNotFoundError as exc:
            raise error(f"{where}.environment: no verifiers taskset {environment!r} is installed ({exc}); give an "
                        "installed taskset id or 'package.module:function'") from None
        except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError, verifiers' TypeError/ValueError
            raise error(f"{where}.kwargs: verifiers taskset {environment!r} refused {kwargs}: "
                        f"{type(exc).__name__}: {exc}") from None
    taskset = made.taskset if isinstance(made, vf.Env) else made
    if not isinstance(taskset, vf.Taskset):
        raise error(f"{where}.environment {environment!r} returned {type(made).__name__}, not a verifiers Taskset or Env")
    return (made if made is not taskset else None), taskset
