"""Tasks (train/eval prompt sets with gold answers), registered in ``TASKS`` on import."""

from grove.tasks import (  # noqa: F401  (register the built-in tasks)
    arithmetic,
    files,
)
from grove.tasks.task import (
    TASKS,
    Example,
    Task,
    TaskParamsError,
    TaskSplits,
    build_task,
    columns_for_rewards,
)

__all__ = ["TASKS", "Example", "Task", "TaskParamsError", "TaskSplits", "build_task", "columns_for_rewards"]
