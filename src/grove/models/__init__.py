"""Models: loading (a local directory or the embedded SmolLM2, converted once from GGUF), tiny random
models for tests, and the training forward that computes response log-probs in batch layout
(:mod:`~grove.models.forward`)."""
