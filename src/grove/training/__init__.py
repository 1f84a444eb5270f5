"""The training loop (:mod:`~grove.training.trainer`) and what only it needs: the optimizer and its
schedule (:mod:`~grove.training.optim`) and the checkpointed prompt order (:mod:`~grove.training.prompt_sampler`)."""
