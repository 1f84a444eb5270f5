"""Generation: the :class:`~grove.rollout.engine.RolloutEngine` protocol and sampling parameters, the
transformers KV-cache engine (:mod:`~grove.rollout.hf_engine`), and the optional bfloat16 copy of the
policy used for generation (:mod:`~grove.rollout.generation_weights`)."""
