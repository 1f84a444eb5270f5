"""One data row → ``(input_ids, loss_mask)``: the tokens a rollout would train on, and which of them are trained.

Row formats (TRL's dataset formats, plus grove's demonstration files):

* ``messages``: a conversation ``[{"role": "system" | "user" | "assistant" | "tool", "content": str}, ...]``;
  every assistant message is trained on, nothing else;
* ``prompt_completion``: ``prompt`` and ``completion`` strings (a single-turn example), or lists of messages (the
  prompt's messages are context; the completion's assistant messages are trained on);
* ``demonstrations``: :class:`grove.sft.demonstration_format.DemonstrationRow`, ids taken as they are.

Token parity with RL rollouts: a rollout trains on the prompt ids of
:func:`grove.rollout.engine.encode_prompts` followed by the sampled tokens and the end-of-turn token it stopped on.
So a conversation is tokenised piecewise at message boundaries, never as one rendered text (byte-pair merges across
a boundary would give ids no rollout produces): the untrained stretch before assistant message ``i`` is the chat
template's rendering of ``messages[:i]`` with the generation prompt, less the text already covered; the trained
stretch is the message's content tokenised on its own, then ``tokenizer.eos_token_id``. The template's text after
the eos token (ChatML's ``"\\n"``) opens the next untrained stretch, as the environment tokens of a grove
conversation rollout do (:mod:`grove.experience.conversation`). Tokens after the last trained one are left out:
they carry no loss.

A vision-language policy's rows may hold images: a message's content is then a list of text and image parts
(``{"type": "image", "image": <path>}``; relative paths are read from the data file's folder), rendered by the
processor's chat template; each untrained stretch is encoded by the processor with the images whose placeholders it
holds (the first stretch, the prompt, exactly as a rollout encodes it), and :attr:`RowTokenizer.images` holds the
pixels of the last row's images.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grove.rollout.engine import encode_prompts
from grove.sft.data_files import json_kind
from grove.sft.demonstration_format import DEMONSTRATION_KEYS, DemonstrationRow, tokenizer_fingerprint
from grove.vision.image_prompts import ImagePromptError, encode_with_images, image_placeholder, parts_messages
from grove.vision.image_table import ImageTable
from grove.vision.pixel_files import PixelFileError, pixel_layout_fingerprint, read_pixels
from grove.vision.processors import processor_of

__all__ = ["DATA_FORMATS", "ROLES", "RowError", "RowTokenizer", "detect_format"]

#: the row formats ``data_format`` can force (``auto`` detects one per file)
DATA_FORMATS = ("messages", "prompt_completion", "demonstrations")
ROLES = ("system", "user", "assistant", "tool")

Tokens = tuple[list[int], list[int]]  # (input_ids, loss_mask)


class RowError(ValueError):
    """What is wrong with one row and how to fix it; the caller puts the row's ``path:line`` in front."""


def present_keys(row: dict[str, Any]) -> list[str]:
    """The keys of ``row`` that hold a value (``datasets`` fills a key another row has with ``None``)."""
    return [key for key, value in row.items() if value is not None]


def detect_format(row: dict[str, Any]) -> str | None:
    """The format a row's keys announce: demonstrations (any of the id keys), messages, prompt_completion; or None."""
    keys = set(present_keys(row))
    if keys & set(DEMONSTRATION_KEYS):
        return "demonstrations"
    if "messages" in keys:
        return "messages"
    if keys & {"prompt", "completion"}:
        return "prompt_completion"
    return None


class RowTokenizer:
    """Turns rows into ``(input_ids, loss_mask)`` with one tokenizer and the config's prompt mode.

    ``system_prompt`` (when not ``None``) is put first as a system message of every chat that has none, and
    ``use_chat_template=False`` encodes string prompts as plain text: both exactly as
    :func:`grove.rollout.engine.encode_prompts` does for rollouts.
    """

    def __init__(self, tokenizer: Any, *, system_prompt: str | None, use_chat_template: bool) -> None:
        eos_id = tokenizer.eos_token_id
        if not isinstance(eos_id, int):
            raise ValueError("the tokenizer has no single eos token id: SFT needs the token generation stops on")
        self.tokenizer = tokenizer
        self.eos_id = eos_id
        self.eos_text = tokenizer.convert_ids_to_tokens(eos_id)
        self.system_prompt = system_prompt
        self.use_chat_template = use_chat_template
        self._fingerprint: str | None = None
        self.vision = processor_of(tokenizer) is not None
        self.images: ImageTable | None = None  # the pixels of the last row's images (a vision-language policy)
        self._pending: list[Any] = []  # the row's images not yet encoded, in order
        self._pieces: list[ImageTable] = []

    def tokens(self, row: dict[str, Any], data_format: str, image_dir: Path | None = None) -> Tokens:
        """The row's ``(input_ids, loss_mask)`` read as ``data_format``; :class:`RowError` when it cannot be. The
        pixels of its images (relative paths read from ``image_dir``) are then in :attr:`images`."""
        self.images, self._pending, self._pieces, self._image_dir = None, [], [], image_dir
        ids_mask = self._tokens(row, data_format)
        if self._pending:
            raise RowError(f"{len(self._pending)} image(s) of the row have no placeholder in the rendered chat: the "
                           "chat template drops image parts; use the processor's own template")
        if self._pieces:
            self.images = ImageTable.joined(self._pieces)
        return ids_mask

    def _tokens(self, row: dict[str, Any], data_format: str) -> Tokens:
        if data_format == "messages":
            messages = self._checked_messages(_field(row, "messages", "a list of messages"), "messages")
            labels = [f"messages[{k}]" for k in range(len(messages))]
            return self._chat(messages, labels, [i for i, m in enumerate(messages) if m["role"] == "assistant"])
        if data_format == "prompt_completion":
            return self._prompt_completion(row)
        if data_format == "demonstrations":
            return self._demonstration(row)
        raise ValueError(f"unknown data format {data_format!r}; choose one of {DATA_FORMATS}")

    # ------------------------------------------------------------------ formats
    def _prompt_completion(self, row: dict[str, Any]) -> Tokens:
        prompt = _field(row, "prompt", "a string or a list of messages")
        completion = _field(row, "completion", "a string or a list of messages")
        if isinstance(prompt, str) and isinstance(completion, str):
            if not completion.strip():
                raise RowError("the completion is empty: give it the text to train on, or leave the row out")
            if self.use_chat_template:
                messages = [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
                return self._chat(messages, ["prompt", "completion"], [1])
            try:
                prompt_ids = encode_prompts(self.tokenizer, [prompt], system_prompt=self.system_prompt,
                                            use_chat_template=False)[0]
            except ValueError as exc:
                raise RowError(f"{exc}: give the row a prompt") from None
            answer = self._encode(completion)
            return [*prompt_ids, *answer, self.eos_id], [0] * len(prompt_ids) + [1] * (len(answer) + 1)
        if isinstance(prompt, list) and isinstance(completion, list):
            prompt_messages = self._checked_messages(prompt, "prompt")
            completion_messages = self._checked_messages(completion, "completion")
            trained = [len(prompt_messages) + i for i, m in enumerate(completion_messages) if m["role"] == "assistant"]
            if not trained:
                raise RowError("the completion has no assistant message: add the assistant's answer to train on")
            labels = [f"prompt[{k}]" for k in range(len(prompt_messages))]
            labels += [f"completion[{k}]" for k in range(len(completion_messages))]
            return self._chat([*prompt_messages, *completion_messages], labels, trained)
        raise RowError(
            f"prompt is {json_kind(prompt)} and completion {json_kind(completion)}: give both as strings, or both "
            "as lists of messages"
        )

    def _demonstration(self, row: dict[str, Any]) -> Tokens:
        try:
            demo = DemonstrationRow.model_validate({key: row[key] for key in present_keys(row)})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'row'}: {e['msg']}" for e in exc.errors())
            raise RowError(f"not a valid demonstration row ({problems}): regenerate the file with grove demos") from None
        if self._fingerprint is None:
            self._fingerprint = tokenizer_fingerprint(self.tokenizer)
        if demo.tokenizer != self._fingerprint:
            raise RowError(
                f"the demonstration was made with another tokenizer (fingerprint {demo.tokenizer!r}, this model's is "
                f"{self._fingerprint!r}): regenerate it with grove demos under this config's model"
            )
        vocabulary = len(self.tokenizer)
        for name, ids in (("prompt_ids", demo.prompt_ids), ("completion_ids", demo.completion_ids)):
            outside = next((i for i in ids if not 0 <= i < vocabulary), None)
            if outside is not None:
                raise RowError(
                    f"{name} holds the token id {outside}, outside this tokenizer's vocabulary (0 to {vocabulary - 1}):"
                    " the row was changed after grove demos wrote it; regenerate the file with grove demos"
                )
        if demo.pixels is not None:
            self._pieces = [self._demonstration_pixels(demo.pixels)]
        ids = [*demo.prompt_ids, *demo.completion_ids]
        return ids, [0] * len(demo.prompt_ids) + list(demo.completion_mask)

    def _demonstration_pixels(self, name: str) -> ImageTable:
        """The pixels a demonstration row's image tokens stand for, read from its pixel file."""
        found = processor_of(self.tokenizer)
        if found is None:
            raise RowError(f"the row's tokens hold pictures (pixels: {name!r}), but the policy is a text-only model: "
                           "train a vision-language model on it, or leave such rows out")
        processor, family = found
        path = Path(name) if self._image_dir is None else self._image_dir / name
        try:
            return read_pixels(path, pixel_layout_fingerprint(processor, family.name))
        except PixelFileError as exc:
            raise RowError(str(exc)) from None

    # ------------------------------------------------------------------ chats
    def _checked_messages(self, value: Any, field: str) -> list[dict[str, Any]]:
        """:func:`_messages`, with image parts allowed in a vision-language policy's rows."""
        messages = _messages(value, field, parts=self.vision)
        if not self.vision and any(isinstance(m["content"], list) for m in messages):
            raise RowError(f"{field} holds content parts (images?), but the policy is a text-only model")
        return messages

    def _with_image_paths(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` with relative image paths read from the data file's folder."""
        if self._image_dir is None:
            return messages
        out = []
        for m in messages:
            content = m["content"]
            if isinstance(content, list):
                content = [
                    {**part, "image": str(self._image_dir / part["image"])}
                    if part.get("type") == "image" and isinstance(part.get("image"), str)
                    and not Path(part["image"]).expanduser().is_absolute() else part
                    for part in content
                ]
            out.append({**m, "content": content})
        return out

    def _chat(self, messages: list[dict[str, Any]], labels: list[str], trained: list[int]) -> Tokens:
        """Piecewise tokens of a conversation whose messages ``trained`` (assistant messages) carry the loss;
        ``labels`` name the messages in errors (``messages[2]``)."""
        if not self.use_chat_template:
            raise RowError(
                "chat messages need the chat template: set use_chat_template (rollout.use_chat_template) to true, "
                "or give prompt and completion as plain strings"
            )
        if not getattr(self.tokenizer, "chat_template", None):
            raise RowError("the tokenizer has no chat template: give prompt and completion as plain strings and set "
                           "use_chat_template to false, or use a model whose tokenizer has one")
        if not trained:
            raise RowError("the conversation has no assistant message: add the assistant's answer to train on")
        if self.system_prompt is not None and messages[0]["role"] != "system":
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
            labels = ["system_prompt", *labels]
            trained = [i + 1 for i in trained]
        if self.vision:  # content as parts (what the processor's template reads), the images loaded, in order
            try:
                messages, self._pending = parts_messages(self._with_image_paths(messages), None, "the row")
            except ImagePromptError as exc:
                raise RowError(str(exc).removeprefix("the row: ")) from None
        ids: list[int] = []
        mask: list[int] = []
        covered = ""  # the rendered text the tokens so far stand for
        previous = ""  # that text less the last trained message's eos (to tell a missing eos from a rewrite)
        for i in trained:
            content = _text_of(messages[i]["content"], labels[i])
            if not content.strip():
                raise RowError(f"{labels[i]} is an empty assistant message: give it text, or leave it out")
            before = self._render(messages[:i], labels[i])
            if not before.startswith(covered):
                if before.startswith(previous):
                    raise RowError(
                        f"the chat template does not end an assistant message with the eos token {self.eos_text!r} "
                        f"that generation stops on (seen before {labels[i]}): train on one assistant turn per "
                        "row, or use a template that does"
                    )
                raise RowError(
                    f"the chat template renders the messages before {labels[i]} differently once more follow "
                    "(it rewrites earlier turns), so no piecewise tokenisation matches a rollout: split the "
                    "conversation into one row per assistant turn"
                )
            context = self._encode_context(before[len(covered):])
            if not ids and not context:
                raise RowError("nothing comes before the first assistant message: give it a prompt")
            answer = self._encode(content)
            ids += [*context, *answer, self.eos_id]
            mask += [0] * len(context) + [1] * (len(answer) + 1)
            previous = before + content
            covered = previous + self.eos_text
        return ids, mask

    def _render(self, messages: list[dict[str, Any]], upto: str) -> str:
        renderer = processor_of(self.tokenizer)[0] if self.vision else self.tokenizer
        try:
            return renderer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - jinja2 and the template's own raise_exception
            raise RowError(f"the chat template cannot render the messages before {upto}: {exc}") from None

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _encode_context(self, text: str) -> list[int]:
        """An untrained stretch: with a vision-language policy, through the processor with the images whose
        placeholders it holds (their pixels kept for the row)."""
        if not self.vision or not text:
            return self._encode(text)
        count = text.count(image_placeholder(self.tokenizer))
        if count > len(self._pending):
            raise RowError(f"the rendered chat holds {count} image placeholders where {len(self._pending)} image(s) "
                           "remain: give every image placeholder an image part")
        images, self._pending = self._pending[:count], self._pending[count:]
        ids, table = encode_with_images(self.tokenizer, text, images)
        if table is not None:
            self._pieces.append(table)
        return ids


def _field(row: dict[str, Any], key: str, expected: str) -> Any:
    value = row.get(key)
    if value is None:
        raise RowError(f"the row has no {key!r} (keys: {present_keys(row)}): give it {key!r}, {expected}")
    return value


def _text_of(content: str | list, label: str) -> str:
    """An assistant message's text: its string, or the text of its parts (an answer holds no image)."""
    if isinstance(content, str):
        return content
    if any(p.get("type") != "text" for p in content):
        raise RowError(f"{label} is an assistant message with an image part: answers are text")
    return "".join(str(p.get("text", "")) for p in content)


def _messages(value: Any, field: str, parts: bool = False) -> list[dict[str, Any]]:
    """The checked messages of ``field``, without ``None`` entries (keys ``datasets`` added for other rows);
    ``parts``: a content may also be a list of text and image parts (a vision-language policy's rows)."""
    if not isinstance(value, list) or not value:
        raise RowError(f"{field} must be a non-empty list of {{\"role\", \"content\"}} objects, got {json_kind(value)}")
    out = []
    for k, message in enumerate(value):
        where = f"{field}[{k}]"
        if not isinstance(message, dict):
            raise RowError(f"{where} must be an object with \"role\" and \"content\", got {json_kind(message)}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise RowError(f"{where} has role {role!r}: the roles are {', '.join(ROLES)}")
        if not isinstance(content, str) and not (parts and isinstance(content, list) and all(
                isinstance(p, dict) and p.get("type") in ("text", "image") for p in content)):
            expected = "a string or a list of text and image parts" if parts else "a string"
            raise RowError(f"{where} ({role}) content must be {expected}, got {json_kind(content)}")
        out.append({key: v for key, v in message.items() if v is not None})
    return out
