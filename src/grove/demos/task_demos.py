"""Gold completions of a single-turn task, with the prompt tokens a rollout of the task generates from.

Examples come from the task's *train* split only, in the epoch order of
:class:`grove.experience.task_sampler.TaskSampler` seeded with ``seed`` (cycling when more are asked for than the
split holds). Each prompt is encoded as :meth:`grove.experience.completions.CompletionSource.draw_prompts` encodes
it (:func:`grove.rollout.engine.encode_prompts` with ``rollout.system_prompt`` and ``rollout.use_chat_template``,
then :func:`grove.rollout.engine.fit_prompts` with ``rollout.prompt_overflow``); the completion
(:mod:`grove.demos.task_answers`) is tokenised as a rollout samples it (its tokens, then EOS), all trained on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from grove.config import GroveConfig
from grove.demos.demo_progress import DemoProgress
from grove.demos.picture_rows import picture_row
from grove.demos.rows import action_ids, demonstration_row
from grove.demos.summary import DemoCounts
from grove.demos.task_answers import NoGoldCompletionError, gold_completions
from grove.experience.episode_records import SampleTokens
from grove.experience.task_sampler import TaskSampler
from grove.rollout.engine import context_length, encode_prompts, fit_prompts, prompt_preview
from grove.sft.demonstration_format import tokenizer_fingerprint
from grove.tasks.task import build_task, require_examples
from grove.vision.image_prompts import has_images

__all__ = ["TaskDemonstrations"]


class TaskDemonstrations:
    """Gold completions of ``cfg.task``'s training examples as demonstration rows."""

    def __init__(self, cfg: GroveConfig, tokenizer: Any, *, model_context: int | None = None) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.fingerprint = tokenizer_fingerprint(tokenizer)
        self.task = build_task(cfg.task)
        require_examples(self.task, cfg.task.id, ("train",))
        self.name = cfg.task.id
        self.completion = gold_completions(self.task, cfg)
        self.model_context = model_context if model_context is not None else context_length(None, tokenizer)

    def prompt_ids(self, index: int) -> list[int]:
        """The prompt ids of training example ``index``, as the completions source builds them."""
        r = self.cfg.rollout
        example = self.task.train[index]
        ids = encode_prompts(
            self.tokenizer, [example.prompt], system_prompt=r.system_prompt, use_chat_template=r.use_chat_template
        )
        fitted, _ = fit_prompts(
            ids,
            context_length=self.model_context,
            max_new_tokens=r.max_new_tokens,
            overflow=r.prompt_overflow,
            describe=lambda _: f"train example {index} of task {self.name!r} ({prompt_preview(example.prompt)})",
        )
        return fitted[0]

    def rows(
        self, counts: DemoCounts, *, episodes: int, seed: int, progress: DemoProgress | None = None,
        image_dir: Path | None = None,
    ) -> Iterator[dict[str, Any]]:
        """The rows of ``episodes`` training examples; ``counts`` is updated as they are made and ``progress``
        told. An example whose prompt holds images becomes a ``messages`` row (the prompt, then the gold completion
        as the assistant's message) with its images saved as PNG files in ``image_dir`` (named relative to the
        demonstration file's folder, which ``grove sft`` reads them from): token ids cannot carry pixels."""
        for number, index in enumerate(TaskSampler(len(self.task.train), seed).next(episodes)):
            example = self.task.train[index]
            text = self.completion(example)
            if not isinstance(text, str) or not text.strip():
                raise NoGoldCompletionError(
                    f"task {self.name!r}: the gold completion of train example {index} "
                    f"({prompt_preview(example.prompt)}) is {text!r}; it must be a non-empty string"
                )
            ids = action_ids(self.tokenizer, text)
            if has_images(example.prompt):
                if image_dir is None:
                    raise ValueError(f"task {self.name!r} has images: give the folder to save them in (image_dir)")
                row = picture_row(example.prompt, text, image_dir, f"{number:06d}",
                                  source=self.name, task_id=index, episode=number)
            else:
                sample = SampleTokens(prompt_ids=self.prompt_ids(index))
                sample.append(ids, None, 0)
                row = demonstration_row(
                    sample, self.tokenizer, self.fingerprint, source=self.name, task_id=index, episode=number, won=True
                )
            counts.episodes += 1
            counts.won += 1
            counts.kept_episodes += 1
            counts.turns += 1
            counts.oracle_actions += 1
            counts.long_actions += len(ids) > self.cfg.rollout.max_new_tokens
            counts.rows += 1
            counts.completion_tokens += len(ids)
            if progress is not None:
                progress.tick(counts)
            yield row
