"""Reward-model data, objectives and held-out agreement (``grove rm``): preference pairs or labelled completions
read from the files of the ``rm`` section, tokenised as the chat the policy's completion is part of, the
Bradley–Terry and regression losses, and the held-out statistics with their 95% intervals. The trainer's loop runs
them as a stage of its own (:mod:`grove.training.reward_model_stage`)."""
