"""The prompter a config asks for: how an environment's episodes become model contexts and training samples.

One function, :func:`build_prompter`, reads ``env.prompt`` (``per_step`` or ``conversation``), ``env.history``,
``env.show_admissible_actions``, ``env.max_turns``, ``env.max_context_tokens``, ``env.prompt_overflow``,
``rollout.system_prompt`` and ``rollout.use_chat_template``. The RL rollouts
(:class:`grove.experience.environment.EnvironmentSource`) and the expert demonstrations (:mod:`grove.demos`) both
build their prompts through it, so a demonstration trains on exactly the tokens a rollout of the same actions
would have built.
"""

from __future__ import annotations

from typing import Any

from grove.config import GroveConfig
from grove.experience.context_budget import ContextBudget
from grove.experience.conversation import ConversationPrompter
from grove.experience.episode_records import Prompter
from grove.experience.per_step_prompts import PerStepPrompter

__all__ = ["build_prompter", "prompt_instructions"]


def prompt_instructions(cfg: GroveConfig, instructions: str) -> str:
    """The system text of every prompt: ``rollout.system_prompt`` (when set), a blank line, then the environment's
    ``instructions``."""
    if cfg.rollout.system_prompt:
        return f"{cfg.rollout.system_prompt}\n\n{instructions}"
    return instructions


def build_prompter(
    cfg: GroveConfig, instructions: str, tokenizer: Any, model_context: int | None, max_new_tokens: int
) -> Prompter:
    """A fresh prompter for one trajectory of ``cfg.env``.

    ``instructions``: the environment's (its suite's ``instructions``; ``rollout.system_prompt`` is put before
    them here); ``model_context``: the most tokens the model takes (``None``: unknown); ``max_new_tokens``: the
    tokens a turn may generate, kept free in every context (:class:`ContextBudget`).
    """
    e = cfg.env
    if e is None:
        raise ValueError("build_prompter needs a config with an `env` section")
    instructions = prompt_instructions(cfg, instructions)
    if e.prompt == "conversation":
        return ConversationPrompter(
            tokenizer,
            instructions,
            show_admissible=e.show_admissible_actions,
            max_context_tokens=e.max_context_tokens,
            max_new_tokens=max_new_tokens,
            budget=ContextBudget.of(
                model_context, max_new_tokens, e.prompt_overflow, max_context_tokens=e.max_context_tokens
            ),
        )
    return PerStepPrompter(
        tokenizer,
        instructions,
        history=e.history,
        show_admissible=e.show_admissible_actions,
        max_turns=e.max_turns,
        use_chat_template=cfg.rollout.use_chat_template,
        budget=ContextBudget.of(model_context, max_new_tokens, e.prompt_overflow),
    )
