"""Expert demonstrations, rendered exactly as RL rollouts render them, for a supervised warm start (``grove demos``).

Small models rarely succeed on agent tasks, so group-relative RL gets no signal from them; a supervised warm start
on expert demonstrations gives it one. :func:`write_demonstrations` writes a demonstration file
(:mod:`grove.sft.demonstration_format`) for a config:

* with an ``env`` section, episodes of the environment's oracle (:mod:`grove.envs.oracle`) on its training tasks,
  optionally with random actions mixed in (``noise``) that the oracle recovers from
  (:mod:`grove.demos.expert_episodes`), each environment call under the rollout's ``env.step_timeout_s``;
* for a single-turn task, gold completions of its training examples (:mod:`grove.demos.task_answers`).

A line of progress is reported now and then (:mod:`grove.demos.demo_progress`); a run that keeps no episode, fails
or is interrupted writes nothing (:mod:`grove.demos.writer`).

Prompts are built by the same code as the rollouts' (:func:`grove.experience.prompters.build_prompter`,
:func:`grove.rollout.engine.encode_prompts`) and each action is tokenised as a rollout samples it, so ``grove sft``
trains on exactly the tokens RL would train on after the same actions.
"""

from grove.demos.action_text import ActionFormatError, action_text, checked_action
from grove.demos.demo_progress import DemoProgress
from grove.demos.expert_episodes import DemoEpisode, DemonstrationError, EnvironmentDemonstrations
from grove.demos.rows import action_ids, demonstration_row
from grove.demos.summary import DemoCounts, DemoSummary, NoDemonstrationsError
from grove.demos.task_answers import (
    NoGoldCompletionError,
    arithmetic_completion,
    gold_completions,
)
from grove.demos.task_demos import TaskDemonstrations
from grove.demos.writer import DemonstrationsInterrupted, write_demonstrations

__all__ = [
    "ActionFormatError",
    "DemoCounts",
    "DemoEpisode",
    "DemoProgress",
    "DemoSummary",
    "DemonstrationError",
    "DemonstrationsInterrupted",
    "EnvironmentDemonstrations",
    "NoDemonstrationsError",
    "NoGoldCompletionError",
    "TaskDemonstrations",
    "action_ids",
    "action_text",
    "arithmetic_completion",
    "checked_action",
    "demonstration_row",
    "gold_completions",
    "write_demonstrations",
]
