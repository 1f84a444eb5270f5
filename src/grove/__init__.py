"""grove: group-relative reinforcement learning (GRPO and its family) for language models."""

__version__ = "0.1.0"
