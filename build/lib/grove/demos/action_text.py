"""The text a policy would emit for an environment command, in the format of the configured action parser.

An expert demonstration trains the policy to write what the rollout's parser reads back as the expert's command
(:mod:`grove.envs.actions`):

* ``tag``: ``<action>CMD</action>`` (the parser's ``tag`` name), after ``<think>…</think>`` when ``require_think``
  (verl-agent's ALFWorld format: reasoning, then the action);
* ``admissible``, ``first_mention``, ``raw`` and any user parser: ``CMD`` as it is;
* ``full_text``: the command is the whole reply (``kb_routing``'s oracle writes its own ``<think>`` and
  ``<query>``/``<answer>`` tags), as it is.

:func:`checked_action` runs the configured parser on the text the rollout would decode from its tokens and raises
:class:`ActionFormatError` when it does not give the command back, so a demonstration never teaches a reply its own
rollout would read as something else.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from grove.envs.actions import ParsedAction
from grove.envs.base import Observation

__all__ = ["ActionFormatError", "action_text", "checked_action"]

class ActionFormatError(ValueError):
    """The configured action parser does not read the demonstration's text back as the command."""


def action_text(command: str, parser_id: str, params: BaseModel) -> str:
    """What the policy writes to send ``command`` through the parser ``parser_id`` (with its validated
    ``params``): see the module docstring."""
    if parser_id == "tag":
        tag = getattr(params, "tag", "action")
        think = f"<think>Next action: {command}</think>\n" if getattr(params, "require_think", False) else ""
        return f"{think}<{tag}>{command}</{tag}>"
    return command


def checked_action(
    command: str,
    text: str,
    observation: Observation,
    parse: Callable[[str, Observation], ParsedAction],
    parser_id: str,
) -> ParsedAction:
    """``parse(text, observation)`` when it is a valid action equal to ``command``; else :class:`ActionFormatError`
    naming the parser, the text and what it read."""
    parsed = parse(text, observation)
    if parsed.valid and parsed.action == command:
        return parsed
    got = f"the action {parsed.action!r}" if parsed.valid else f"an invalid action ({parsed.reason})"
    raise ActionFormatError(
        f"env.action_parser {parser_id!r} reads the demonstration text {text!r} as {got}, not as the expert's "
        f"command {command!r}; a demonstration must parse back to its command. Choose an action parser that reads "
        f"the command exactly (env.action_parser: {{id: tag}} writes <action>…</action>), or make the environment's "
        "commands unambiguous for this parser"
    )
