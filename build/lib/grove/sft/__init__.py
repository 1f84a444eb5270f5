"""Supervised fine-tuning data (``grove sft``): files of chat messages, prompt/completion pairs or ``grove demos``
demonstrations, tokenised with the loss on the policy's own tokens only, packed into the typed batch the update
trains on. The trainer's loop runs them as a source of demonstrations (:mod:`grove.training.supervised_stage`)."""
