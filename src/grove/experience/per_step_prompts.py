"""Per-step prompts (verl-agent's way): every turn is a fresh prompt and one training sample.

The prompt of turn ``t`` is the chat rendering of::

    system:  the environment's instructions
    user:    the last ``history`` (observation, action) pairs, then the current observation
             (and its admissible actions, numbered, when the environment lists them)

and its sample's response is exactly the tokens sampled at that turn. Contexts stay short whatever the
episode length; the cost is one prompt per step in the training forward.

A prompt longer than the budget (:mod:`grove.experience.context_budget`) is not generated from: the trajectory
ends there, or, with ``truncate_observation``, the current observation comes first: the history pairs are left out
of this prompt, oldest first, until it fits whole, and one too long even alone keeps its end (with no history).
The history shows each past observation as its prompt showed it (cut or not). An observation's images (a
vision-language policy) go before its text in the user message; past observations appear in the history as text.
"""

from __future__ import annotations

from typing import Any

from grove.envs.base import Observation
from grove.experience.context_budget import CHARS_PER_TOKEN, ContextBudget, ContextOverflow, cut_to_fit
from grove.experience.episode_records import SampleTokens, Turn
from grove.rollout.engine import encode_prompts
from grove.rollout.prompt_encoding import encode_prompt_batch
from grove.vision.image_prompts import has_images
from grove.vision.image_table import ImageTable
from grove.vision.processors import processor_of

__all__ = ["PerStepPrompter", "encode_messages", "observation_content", "render_observation"]


_NO_ROOM_FOR_A_CUT = (
    "Not even the end of the observation fits beside the instructions (env.prompt_overflow: truncate_observation): "
    "shorten the instructions or lower rollout.max_new_tokens"
)

def observation_content(text: str, observation: Observation) -> str | list[dict[str, Any]]:
    """A user message's content for ``observation`` rendered as ``text``: the text, after the observation's images
    (image parts) when it has any."""
    if not observation.images:
        return text
    return [*({"type": "image", "image": image} for image in observation.images), {"type": "text", "text": text}]


def encode_messages(tokenizer: Any, messages: list[dict[str, Any]]) -> tuple[list[int], ImageTable | None]:
    """Chat ``messages`` (the last a user message) rendered with the generation prompt and encoded: through a
    vision-language policy's processor when it has one or a message holds images (their pixels returned, one owner),
    else with the tokenizer's chat template."""
    if processor_of(tokenizer) is not None or has_images(messages):
        encoded = encode_prompt_batch(tokenizer, [messages])
        return encoded.ids[0], encoded.images
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]), None


def render_observation(observation: Observation, show_admissible: bool, text: str | None = None) -> str:
    """The observation as the model reads it: its text (or ``text``, e.g. a cut of it) and, when shown, its
    admissible actions, numbered."""
    text = observation.text.strip() if text is None else text
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
        budget: ContextBudget | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.instructions = instructions
        self.history = history
        self.show_admissible = show_admissible
        self.max_turns = max_turns
        self.use_chat_template = use_chat_template
        self.budget = budget or ContextBudget(None)
        self.past: list[tuple[Turn, str]] = []  # each turn, and its observation's text as its prompt showed it
        self.observation: Observation | None = None
        self.shown: str | None = None  # the current observation's text as shown, once it had to be cut
        self.overflow: ContextOverflow | None = None
        self._samples: list[SampleTokens] = []
        self._context: list[int] | None = None
        self.images = None  # the current observation's pixels, as its prompt holds them

    def begin(self, observation: Observation) -> None:
        self.observation = observation
        self.shown = None
        self.images = None

    def _render(self, text: str | None = None, history: int | None = None) -> str:
        """The user message with the current observation's text as ``text`` (default: as it is) and the last
        ``history`` pairs (default: ``self.history``)."""
        parts = []
        history = self.history if history is None else history
        recent = self.past[-history:] if history else []
        if recent:
            first = len(self.past) - len(recent) + 1
            lines = [
                f"Observation {first + i}: {shown}\nAction {first + i}: {_history_line(t)}"
                for i, (t, shown) in enumerate(recent)
            ]
            parts.append("Your recent history:\n" + "\n".join(lines))
        step = len(self.past) + 1
        parts.append(
            f"Current observation (step {step} of at most {self.max_turns}):\n"
            + render_observation(self.observation, self.show_admissible, text)
        )
        return "\n\n".join(parts)

    def _encode(self, body: str) -> list[int]:
        """The prompt's ids; the current observation's images (a vision-language policy) go before its text, their
        pixels into :attr:`images` (the same for every rendering of one observation)."""
        if processor_of(self.tokenizer) is not None or self.observation.images:
            if not self.use_chat_template:
                raise ValueError("observations with images need rollout.use_chat_template: true")
            system = {"role": "system", "content": self.instructions}
            user = {"role": "user", "content": observation_content(body, self.observation)}
            ids, self.images = encode_messages(self.tokenizer, [system, user])
            return ids
        if self.use_chat_template:
            return encode_prompts(self.tokenizer, [body], system_prompt=self.instructions)[0]
        return encode_prompts(self.tokenizer, [f"{self.instructions}\n\n{body}"], use_chat_template=False)[0]

    def context(self) -> list[int] | None:
        self.overflow = None
        at_least = self.budget.surely_exceeded(self.tokenizer, self.observation.text)
        if at_least is not None:  # too long to be worth measuring: cut it, or end here
            fitted = self._cut() if self.budget.overflow == "truncate_observation" else None
            if fitted is None:
                self.overflow = self.budget.surely_too_long(at_least, _NO_ROOM_FOR_A_CUT)
                return None
            self._context, self.shown = fitted
            return self._context
        ids = self._encode(self._render())
        if not self.budget.fits(len(ids)):
            fitted = self._cut() if self.budget.overflow == "truncate_observation" else None
            if fitted is None:
                self.overflow = self.budget.overflow_of(len(ids), _NO_ROOM_FOR_A_CUT)
                return None
            ids, self.shown = fitted
        self._context = ids
        return ids

    def _cut(self) -> tuple[list[int], str] | None:
        """The prompt when the full one does not fit: the current observation comes first, so the history pairs
        are left out, oldest first, until it fits whole; an observation too long even alone keeps its end."""
        text = self.observation.text.strip()
        if len(text) <= self.budget.limit * CHARS_PER_TOKEN:  # it may fit whole (else no need to measure it again)
            for history in range(min(self.history, len(self.past)) - 1, -1, -1):
                ids = self._encode(self._render(text, history))
                if self.budget.fits(len(ids)):
                    return ids, text
        return cut_to_fit(
            self.tokenizer, text, self.budget.limit, lambda shown: self._encode(self._render(shown, 0)), whole=False
        )

    def record(self, turn: Turn, next_observation: Observation | None) -> None:
        sample = SampleTokens(prompt_ids=list(self._context), images=self.images)
        sample.append(turn.action_ids, turn.logprobs, len(self.past))
        self._samples.append(sample)
        self.past.append((turn, self.shown if self.shown is not None else turn.observation.text.strip()))
        self.begin(next_observation)

    def samples(self) -> list[SampleTokens]:
        return self._samples
