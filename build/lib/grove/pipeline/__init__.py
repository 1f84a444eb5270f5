"""The stages of one training step, each a function over the typed :class:`~grove.batch.RolloutBatch`.

In order (the trainer calls them; none branches on the algorithm):

* :mod:`~grove.pipeline.collect`: prompts → completions → rewards → this rank's scored batch (overlong filtering
  and penalty), with :mod:`~grove.pipeline.round_scores` for what can be wrong with a round's scores (samples no
  reward applies to, an overflowing weighted sum); the environment source (:mod:`grove.experience.environment`)
  is the other way to a scored batch;
* :mod:`~grove.pipeline.dynamic_sampling`: DAPO's rounds until enough groups carry signal, for every source;
* :mod:`~grove.pipeline.credit`: reference log-probs → the step's batch over the ranks → one score per sample
  (the reward aggregator) → KL in the reward → advantages → per-objective statistics, for every source;
* :mod:`~grove.pipeline.downsampling`: D^3S — the max-``Var(A)`` rollouts before the update, the top
  ``|A|·H`` tokens inside it;
* :mod:`~grove.pipeline.rollout_correction`: TIS / MIS importance weights for the rollout-vs-training mismatch;
* :mod:`~grove.pipeline.update`: μ epochs × mini-batches × micro-batches of the loss, one optimizer step each;
* :mod:`~grove.pipeline.coefficients`: the KL and entropy coefficients (fixed or adaptive) between steps;
* :mod:`~grove.pipeline.step_metrics`: the rollout statistics logged every step.

The formulas they apply live in :mod:`grove.core`.
"""
