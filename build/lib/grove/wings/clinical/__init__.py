"""The clinical task: multiple-choice diagnosis from HPO phenotypes with the CRPO objectives (``grove[clinical]``;
docs/clinical-task.md)."""
