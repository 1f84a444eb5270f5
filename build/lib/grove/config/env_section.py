"""The ``env`` section: multi-turn environment rollouts (agent experience).

Present, it switches the experience source to environment episodes (``experience_source: auto``):
``train.prompts_per_step`` env groups per step, each of ``train.completions_per_prompt`` (G) copies
reset to the same task and seed; the ``rewards`` section is not used (the environment gives the rewards).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from grove.config.components import ComponentSpec
from grove.config.sections import Section

__all__ = ["EnvConfig"]


class EnvConfig(Section):
    id: str = Field(
        description="Environment: a registry id (frozenlake, cliffwalking, taxi, sokoban, textworld, kb_routing) or an import "
        "path 'package.module:factory' returning an EnvironmentSuite."
    )
    params: dict[str, Any] = Field(default_factory=dict, description="The environment's own parameters.")
    max_turns: int = Field(8, ge=1, description="Turns per episode; an episode still running then ends (truncated).")
    prompt: Literal["per_step", "conversation"] = Field(
        "per_step",
        description="'per_step': every turn is a fresh prompt (instructions + the last `history` turns + the current "
        "observation) and one training sample (verl-agent's way); 'conversation': one growing chat, token-in-token-out "
        "(the sampled tokens are trained as they are, environment tokens appended as ids and masked out of the loss), "
        "a whole episode trained as one sequence.",
    )
    history: int = Field(2, ge=0, description="per_step prompts: how many previous (observation, action) pairs to show.")
    show_admissible_actions: bool = Field(
        True, description="List the admissible actions (numbered) in each observation, when the environment has them."
    )
    action_parser: ComponentSpec = Field(
        default_factory=lambda: ComponentSpec(id="tag"),
        description="How model text becomes an environment action: {id: tag | admissible | raw | first_mention | "
        "full_text, <param>: value}.",
    )
    invalid_action_penalty: float = Field(
        0.1, ge=0.0, description="Charged to a step whose action could not be parsed (the environment is not stepped)."
    )
    anchor_similarity: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="null: anchor groups by exact anchor key; a threshold in (0, 1]: also pool states of one group whose "
        "observation texts have a difflib similarity ratio ≥ it (greedy clustering, O(n²) per group).",
    )
    max_context_tokens: int = Field(
        4096,
        ge=16,
        description="conversation prompts: the most tokens a conversation's context (plus rollout.max_new_tokens) may "
        "hold; the model's context length applies too when smaller. Past it: env.prompt_overflow.",
    )
    prompt_overflow: Literal["end", "truncate_observation"] = Field(
        "end",
        description="A turn's context that would not fit the model's context (or env.max_context_tokens) with "
        "rollout.max_new_tokens: 'end' ends the trajectory there as truncated (counted in context_overflow_trajectories, "
        "warned once); 'truncate_observation' keeps the end of the observation that fits (after a '[…]' mark; "
        "per_step prompts leave out old history first when needed) and ends the trajectory only when nothing fits.",
    )
    step_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds an environment's reset or step may take; a slower call ends that trajectory as an "
        "environment error (counted like an exception) and the run goes on. The environment copies' calls of a turn "
        "then run concurrently, one worker thread per copy (a turn with several hung copies costs one timeout); a "
        "thread cannot be killed: a hung environment keeps its thread until it returns. null: no limit, called "
        "directly, one after another.",
    )
