"""How the rollout names, counts and logs an environment's failures.

A failure ends its own trajectory (the other episodes and the run go on) and is counted by kind:

* ``raised``: ``reset`` or ``step`` (or the suite's ``make``) raised an exception;
* ``exited``: it called ``sys.exit`` or raised ``KeyboardInterrupt`` (:class:`grove.user_code.UserCodeExit`);
* ``timeout``: it did not return within ``env.step_timeout_s``;
* ``malformed``: it returned something of the wrong type or value
  (:class:`grove.experience.step_results.MalformedEnvironmentResult`).

Each failure is logged once per process and environment: an exception with its traceback once per exception
type, a malformed result once per thing that was wrong (its message says what is expected instead).
"""

from __future__ import annotations

import logging
import traceback

from grove.experience.env_calls import EnvironmentTimeout
from grove.experience.step_results import MalformedEnvironmentResult
from grove.user_code import UserCodeExit

__all__ = ["ERROR_KINDS", "EnvironmentFailedError", "error_kind", "report_failure"]

log = logging.getLogger("grove.experience")

#: the kinds of environment failure, each counted as ``environment_errors/<kind>``
ERROR_KINDS = ("raised", "exited", "timeout", "malformed")

_seen: set[tuple[str, str, str]] = set()


class EnvironmentFailedError(RuntimeError):
    """Not one episode of a training step took a turn: every trajectory's environment failed (the message names
    the environment and the first failure). One broken copy ends only its trajectory; all of them end the run."""


def error_kind(exc: Exception) -> str:
    if isinstance(exc, MalformedEnvironmentResult):
        return "malformed"
    if isinstance(exc, EnvironmentTimeout):
        return "timeout"
    if isinstance(exc, UserCodeExit):
        return "exited"
    return "raised"


def report_failure(env_name: str, exc: Exception, where: str) -> str:
    """Log ``exc`` the first time its (environment, kind) is seen; the trajectory's error text,
    ``"ExceptionType: message"``."""
    if isinstance(exc, MalformedEnvironmentResult):
        key = (env_name, "malformed", exc.kind)
        if key not in _seen:
            _seen.add(key)
            log.warning(
                "%s; the trajectory ends as an environment error and the run goes on (later malformed %s results "
                "of this environment are only counted, as environment_errors/malformed)", exc, exc.kind,
            )
    else:
        key = (env_name, "exception", type(exc).__name__)
        if key not in _seen:
            _seen.add(key)
            log.warning(
                "environment %s raised in %s; the trajectory ends as failed and the run goes on "
                "(later errors of this type are only counted):\n%s",
                env_name, where, "".join(traceback.format_exception(exc)),
            )
    return f"{type(exc).__name__}: {exc}"
