"""Per-step prompts (verl-agent's way): every turn is a fresh prompt and one training sample.

The prompt of turn ``t`` is the chat rendering of::

    system:  the environment's instructions
    user:    the last ``history`` (observation, action) pairs, then the current observation
             (and its admissible actions, numbered, when the environment lists them)

and its sample's response is exactly the tokens sampled at that turn. Contexts stay short whatever the
episode length; the cost is one prompt per step in the training forward.
"""

from __future__ import annotations

from typing import Any

from grove.envs.base import Observation
from grove.experience.episodes import SampleTokens, Turn
from grove.rollout.engine import encode_prompts

__all__ = ["PerStepPrompter", "render_observation"]


def render_observation(observation: Observation, show_admissible: bool) -> str:
    text = observation.text.strip()
    if show_admissible and observation.admissible_actions:
        listed = "\n".join(f"{i}. {a}" for i, a in enumerate(observation.admissible_actions, start=1))
        text = f"{text}\n\nAdmissible actions:\n{listed}"
    return text


def _history_line(turn: Turn) -> str:
    if turn.parsed.valid:
        return str(turn.parsed.action)
    return f"(invalid: {turn.text.strip()[:80]!r})"


class PerStepPrompter:
    def __init__(
        self,
        tokenizer: Any,
        instructions: str,
        *,
        history: int,
        show_admissible: bool,
        max_turns: int,
        use_chat_template: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.instructions = instructions
        self.history = history
        self.show_admissible = show_admissible
        self.max_turns = max_turns
        self.use_chat_template = use_chat_template
        self.past: list[Turn] = []
        self.observation: Observation | None = None
        self._samples: list[SampleTokens] = []
        self._context: list[int] | None = None

    def begin(self, observation: Observation) -> None:
        self.observation = observation

    def _render(self) -> str:
        parts = []
        recent = self.past[-self.history :] if self.history else []
        if recent:
            first = len(self.past) - len(recent) + 1
            lines = [
                f"Observation {first + i}: {t.observation.text.strip()}\nAction {first + i}: {_history_line(t)}"
                for i, t in enumerate(recent)
            ]
            parts.append("Your recent history:\n" + "\n".join(lines))
        step = len(self.past) + 1
        parts.append(
            f"Current observation (step {step} of at most {self.max_turns}):\n"
            + render_observation(self.observation, self.show_admissible)
        )
        return "\n\n".join(parts)

    def context(self) -> list[int] | None:
        body = self._render()
        if self.use_chat_template:
            self._context = encode_prompts(self.tokenizer, [body], system_prompt=self.instructions)[0]
        else:
            self._context = encode_prompts(
                self.tokenizer, [f"{self.instructions}\n\n{body}"], use_chat_template=False
            )[0]
        return self._context

    def record(self, turn: Turn, next_observation: Observation | None) -> None:
        sample = SampleTokens(prompt_ids=list(self._context))
        sample.append(turn.action_ids, turn.logprobs, len(self.past))
        self._samples.append(sample)
        self.past.append(turn)
        self.observation = next_observation

    def samples(self) -> list[SampleTokens]:
        return self._samples
