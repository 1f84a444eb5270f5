"""Scaling out: the process world, data-parallel strategies (DDP, FSDP2), the step batch across ranks and
full-state checkpoints (docs/distributed.md)."""
