"""Experience sources: where a step's training batch comes from (docs/architecture.md, docs/agents.md).

* :mod:`~grove.experience.source`: the seam (:class:`ExperienceSource`, :class:`SourceContext`, the registry);
* :mod:`~grove.experience.completions`: single-turn prompts of a task, scored by reward functions, collected by
  :mod:`~grove.experience.completion_collection` (prompts → completions → rewards → this rank's scored batch,
  with overlong filtering and penalty), with :mod:`~grove.experience.round_scores` for what can be wrong with a
  round's scores (samples no reward applies to, an overflowing weighted sum);
* :mod:`~grove.experience.environment`: multi-turn environment episodes (agents), built from
  :mod:`~grove.experience.episodes` (the batched turn loop), :mod:`~grove.experience.per_step_prompts` and
  :mod:`~grove.experience.conversation` (the two prompt modes), :mod:`~grove.experience.anchors`
  (anchor groups), :mod:`~grove.experience.trajectory_batch` (trajectories → batch + step table) and
  :mod:`~grove.experience.episode_metrics`; what an environment returns is checked by
  :mod:`~grove.experience.step_results`, its calls (with a time limit, one thread per copy) made by
  :mod:`~grove.experience.env_calls`, its failures counted by :mod:`~grove.experience.env_failures`, and each
  turn's context held to the model's by :mod:`~grove.experience.context_budget`;
* :mod:`~grove.experience.dynamic_sampling`: DAPO's rounds until enough groups carry signal, for both sources;
* :mod:`~grove.experience.task_sampler`: the checkpointed order of prompts or tasks.

The scored batch a source returns goes on to the stages of :mod:`grove.pipeline`.
"""

from grove.experience import completions, environment  # noqa: F401  (register the sources)
from grove.experience.source import ExperienceSource, ScoredExperience, SourceContext, build_experience_source

__all__ = ["ExperienceSource", "ScoredExperience", "SourceContext", "build_experience_source"]
