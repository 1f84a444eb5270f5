"""Calling a user's code (rewards, environments, factories) so that it cannot end the run silently.

Python lets any function end the process: ``sys.exit(0)`` raises :class:`SystemExit`, and a stray
``raise KeyboardInterrupt`` looks like Ctrl-C. Left alone, either unwinds through the trainer and the command
line exits with the user's code (0 for ``sys.exit(0)``: a scheduler would see a finished run) and no message.
Inside :func:`user_code` both become a :class:`UserCodeExit`, an ordinary exception that the caller handles like
any other failure of that code (a reward's ``on_error``, an environment's failed trajectory).

A real Ctrl-C is not user code's doing and must still stop the run. While grove handles SIGINT and SIGTERM itself
(:mod:`grove.training.stop_signals`, around the training loop: the first signal asks for a stop after the step,
the second raises :class:`ImmediateStop`), no genuine Ctrl-C arrives as a plain ``KeyboardInterrupt``, so one
raised inside user code is that code's own. Outside those handlers (start-up, the evaluations before and after
training, ``grove eval``) a ``KeyboardInterrupt`` may be the user's Ctrl-C and is left to propagate: the command
line then says where the run stopped and how to resume. :class:`ImmediateStop` always propagates.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ImmediateStop", "UserCodeExit", "grove_handles_stop_signals", "user_code"]

_stop_handlers_installed = 0  # > 0 while grove's own SIGINT/SIGTERM handlers are in place


class UserCodeExit(RuntimeError):
    """User code called ``sys.exit`` (or raised ``SystemExit`` / ``KeyboardInterrupt``) instead of returning."""


class ImmediateStop(KeyboardInterrupt):
    """A second SIGTERM or Ctrl-C while the run was already stopping: stop at once, where the run stands."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"{signal_name} received a second time: stopping at once")
        self.signal_name = signal_name


@contextmanager
def grove_handles_stop_signals() -> Iterator[None]:
    """Mark the span in which grove's own SIGINT/SIGTERM handlers are installed (see the module docstring)."""
    global _stop_handlers_installed
    _stop_handlers_installed += 1
    try:
        yield
    finally:
        _stop_handlers_installed -= 1


def _exit_description(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        code = exc.code
        return f"called sys.exit({code!r})" if code is not None else "called sys.exit()"
    return "raised KeyboardInterrupt"


@contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run a block of user code; ``SystemExit`` (and a ``KeyboardInterrupt`` that is not a real Ctrl-C) raised in
    it become :class:`UserCodeExit` naming ``what`` (e.g. ``"reward 'my_reward'"``)."""
    try:
        yield
    except ImmediateStop:
        raise
    except KeyboardInterrupt as exc:
        if not _stop_handlers_installed:  # may be the user's Ctrl-C: let it stop the run
            raise
        raise UserCodeExit(f"{what} {_exit_description(exc)} instead of returning") from exc
    except SystemExit as exc:
        raise UserCodeExit(
            f"{what} {_exit_description(exc)} instead of returning; user code must return (or raise an "
            f"exception), never end the process"
        ) from exc
