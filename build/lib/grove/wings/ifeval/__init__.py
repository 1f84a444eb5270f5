"""IFEval: verifiable instructions as a task and a multi-objective reward (``grove[ifeval]``; docs/ifeval-task.md)."""
