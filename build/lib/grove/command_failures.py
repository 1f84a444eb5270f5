"""How the command line words what stopped a command: which exceptions are the user's to fix and their messages, an
output directory that cannot hold a run, a full disk met by a write grove does not wrap, and a run that stopped
before its last step (where, what is saved, how to go on, and a non-zero exit code: a scheduler must never read an
unfinished run as finished). :mod:`grove.cli` prints these as ``error: ...`` lines.
"""

from __future__ import annotations

import os
import signal
import tempfile
import traceback
from pathlib import Path

__all__ = ["early_stop", "output_dir_problem", "unreported_write_failure", "user_error_types", "user_message"]


def user_error_types() -> tuple[type[Exception], ...]:
    """The exception types that are the user's to fix (a config, data file, model directory, prompt length, reward
    or environment of theirs, a full disk): printed as ``error: ...`` with exit code 2. Anything else is a bug and
    keeps its traceback."""
    from grove.config import ConfigError
    from grove.envs.base import EnvironmentUnavailableError
    from grove.experience.env_failures import EnvironmentFailedError
    from grove.experience.step_results import MalformedEnvironmentResult
    from grove.infra.run_lock import RunDirectoryBusy
    from grove.infra.write_failures import RunWriteError
    from grove.models.pretrained import ModelLoadError
    from grove.rewards.scoring import RewardFunctionError, RewardLoadError
    from grove.rollout.engine import PromptTooLongError
    from grove.sft.data_files import SftDataError
    from grove.tasks.task import TaskDataError
    from grove.user_code import UserCodeExit

    return (
        ConfigError, ModelLoadError, TaskDataError, PromptTooLongError, RewardFunctionError, RewardLoadError,
        UserCodeExit, RunWriteError, EnvironmentFailedError, MalformedEnvironmentResult, SftDataError,
        EnvironmentUnavailableError, RunDirectoryBusy,
    )


def user_message(exc: Exception) -> str:
    """The error's message; for a reward function that raised, plus where in the user's code (the innermost cause:
    e.g. the ``SystemExit`` behind a ``UserCodeExit`` is the user's own line)."""
    from grove.rewards.scoring import RewardFunctionError

    text = str(exc)
    cause = exc.__cause__
    while cause is not None and cause.__cause__ is not None and cause.__cause__.__traceback__ is not None:
        cause = cause.__cause__
    if isinstance(exc, RewardFunctionError) and cause is not None and cause.__traceback__ is not None:
        frame = traceback.extract_tb(cause.__traceback__)[-1]
        text += f" (raised at {frame.filename}:{frame.lineno}, in {frame.name})"
    return text


def output_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot hold a run (``None``: it can): create it, write and remove a probe file."""
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        return f"{blocker} is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".grove-write-test-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return reason if not exc.filename or str(exc.filename) == str(path) else f"{reason}: {exc.filename}"
    return None


def unreported_write_failure(exc: BaseException, run_dir: Path) -> str | None:
    """The message for a full disk or a file-size limit met by a write grove does not wrap itself (a cache, a
    library's own file); ``None`` for any other exception."""
    from grove.infra.write_failures import describe_write_failure, write_failure_cause

    path = Path(getattr(exc, "filename", None) or run_dir)
    if write_failure_cause(exc, path) is None:
        return None
    return describe_write_failure(exc, path, "a file", f"start again with --resume {run_dir}")


def early_stop(
    exc: KeyboardInterrupt | SystemExit, step: int | None, run_dir: Path, resume_command: str
) -> tuple[str, int]:
    """``(message, exit code)`` for a run stopped before its last step by a second signal, a Ctrl-C outside the
    training loop, or user code calling ``sys.exit``; ``step``: the step it had reached (``None``: start-up)."""
    from grove.infra.checkpoint import list_checkpoints
    from grove.user_code import ImmediateStop

    if step is None:
        when = "during start-up"
    elif step == 0:
        when = "before the first training step"
    else:
        when = f"during step {step}"
    saved = list_checkpoints(run_dir)
    if saved:
        state = f"the last checkpoint is {saved[-1].name}; continue with:\n  {resume_command}"
    elif (run_dir / "config.yaml").exists():
        state = f"no checkpoint was written yet; start it over in the same directory with:\n  {resume_command}"
    else:
        state = "nothing was saved yet; start it again with the same command"
    if isinstance(exc, ImmediateStop):
        what = f"{exc.signal_name} received a second time: stopped at once"
        code = 128 + signal.Signals[exc.signal_name].value
    elif isinstance(exc, KeyboardInterrupt):
        what, code = "interrupted (Ctrl-C or KeyboardInterrupt)", 128 + signal.SIGINT.value
    else:
        what = (
            f"the run ended early: sys.exit({exc.code!r}) was called (by user code outside a reward or an "
            "environment step, which must return or raise instead)"
        )
        code = exc.code if isinstance(exc.code, int) and exc.code not in (0, 2) else 1
    return f"{what} {when}; {state}", code
