"""Models: loading (a local directory or the embedded SmolLM2, converted once from GGUF), tiny random models for
tests, LoRA adapters, and the training forward that computes response log-probs in batch layout: the layouts on a
bare model (:mod:`~grove.models.padded_forward`, :mod:`~grove.models.shared_prefix_forward`,
:mod:`~grove.models.packed_forward`, chosen in :mod:`~grove.models.forward_layouts`) and their one entry point,
:func:`grove.models.logprob_module.response_logprobs`."""
