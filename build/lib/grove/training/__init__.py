"""The training loop (:mod:`~grove.training.trainer`) and what only it needs: the optimizer and its
schedule (:mod:`~grove.training.optim`). Where experience comes from is :mod:`grove.experience`'s job."""
