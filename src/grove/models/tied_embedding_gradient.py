"""The tied input embedding's gradient as a sparse row update of the output projection's dense gradient.

SmolLM2 and many small models tie the input embedding to the output projection (one ``[V, H]`` parameter).
The embedding's default backward (``embedding_dense_backward``) zero-fills a fresh ``[V, H]`` float32 buffer
every micro-batch and adds the looked-up rows into it; autograd then adds that buffer to the projection's
``[V, H]`` gradient. With ``nn.Embedding.sparse`` the embedding's gradient is a sparse tensor of the looked-up
rows instead, which autograd adds into the projection's dense gradient of the same backward: no ``[V, H]``
buffer, no zero fill. In the trainer that fill cost ≈ 176 ms per micro-batch (the fresh 113 MB buffer is
page-faulted in each time), 1.4 s of an 8.5 s bf16 update; with the sparse row update the update took 7.8,
7.8, 8.4 s against 8.8, 8.1, 8.8 s on the same three steps (docs/benchmarks.md, issue 16). The gradient is
the same sum in another order (float rounding).

Only for a tied, trainable embedding: there the embedding's gradient always meets the projection's dense one
inside the backward, so ``.grad`` stays dense for the optimizer, gradient clipping and DDP. An untied
embedding would get a sparse ``.grad``, which fused AdamW does not take; it is left alone, as are sharded
(FSDP2) parameters. The trainer switches it on in a single process only: DDP buckets a parameter of a sparse
embedding as one that expects sparse gradients.
"""

from __future__ import annotations

from torch import nn

__all__ = ["use_sparse_tied_embedding_gradient"]


def use_sparse_tied_embedding_gradient(model: nn.Module) -> bool:
    """Switch ``model``'s input embedding to sparse gradients when it is an ``nn.Embedding`` whose trainable
    weight is the output projection's; returns whether it did."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    if get_in is None or get_out is None:
        return False
    embedding, head = get_in(), get_out()
    if type(embedding) is not nn.Embedding or head is None:
        return False
    weight = embedding.weight
    if weight is not getattr(head, "weight", None) or not weight.requires_grad or hasattr(weight, "to_local"):
        return False
    embedding.sparse = True
    return True
