"""The stages of one training step after collection, each a function over the typed
:class:`~grove.batch.RolloutBatch`.

A step's scored batch comes from an experience source (:mod:`grove.experience`); from there on, in order (the
trainer calls them; none branches on the algorithm):

* :mod:`~grove.pipeline.credit`: reference log-probs → the step's batch over the ranks → one score per sample
  (the reward combiner) → KL in the reward → advantages → per-objective statistics, for every source;
* :mod:`~grove.pipeline.downsampling`: D^3S — the max-``Var(A)`` rollouts before the update, the top
  ``|A|·H`` tokens inside it;
* :mod:`~grove.pipeline.rollout_correction`: TIS / MIS importance weights for the rollout-vs-training mismatch;
* :mod:`~grove.pipeline.update`: μ epochs × mini-batches × micro-batches of the loss, one optimizer step each;
* :mod:`~grove.pipeline.coefficients`: the KL and entropy coefficients (fixed or adaptive) between steps;
* :mod:`~grove.pipeline.step_metrics`: the rollout statistics logged every step.

The formulas they apply live in :mod:`grove.core`.
"""
