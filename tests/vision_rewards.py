"""A reward with spread for tests of vision-language runs: random tiny models rarely say the right word, so a
continuous score (the share of the letter ``e`` in the completion) gives every group a signal to train on."""

from __future__ import annotations


def e_share(prompts, completions, **kwargs):
    return [c.count("e") / max(len(c), 1) for c in completions]
