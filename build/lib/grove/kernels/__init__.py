"""Fused kernels of the training forward: autograd functions with hand-written backwards that avoid large
intermediates, with no model, config or other grove import.

* :mod:`~grove.kernels.output_projection`: token log-probs and entropies from the output projection, chunked over
  tokens, without a ``[tokens, vocab]`` logits tensor;
* :mod:`~grove.kernels.token_embedding`: the input-embedding lookup whose weight gradient goes into ``.grad`` in
  place.
"""
