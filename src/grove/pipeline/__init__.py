"""The stages of one training step, each a function over the typed :class:`~grove.batch.RolloutBatch`.

In order (the trainer calls them; none branches on the algorithm):

* :mod:`~grove.pipeline.collect`: prompts → completions → rewards → batch → advantages (DAPO dynamic
  sampling, overlong filtering and penalty, KL in the reward), with :mod:`~grove.pipeline.round_scores` for what
  can be wrong with a round's scores (samples no reward applies to, an overflowing weighted sum);
* :mod:`~grove.pipeline.downsampling`: D^3S — the max-``Var(A)`` rollouts before the update, the top
  ``|A|·H`` tokens inside it;
* :mod:`~grove.pipeline.rollout_correction`: TIS / MIS importance weights for the rollout-vs-training mismatch;
* :mod:`~grove.pipeline.update`: μ epochs × mini-batches × micro-batches of the loss, one optimizer step each;
* :mod:`~grove.pipeline.coefficients`: the KL and entropy coefficients (fixed or adaptive) between steps;
* :mod:`~grove.pipeline.step_metrics`: the rollout statistics logged every step.

The formulas they apply live in :mod:`grove.core`.
"""
