"""Infrastructure of a run, no algorithm: checkpoints, run logs, progress, plots, process runtime
(threads, host allocator), mixed precision, and the peak-memory planner.

* :mod:`~grove.infra.checkpoint`: atomic, resumable checkpoints (safetensors + trainer state);
* :mod:`~grove.infra.run_logs`: ``metrics.jsonl``, ``eval.jsonl``, ``samples.jsonl``, TensorBoard;
* :mod:`~grove.infra.progress`: the progress bar (or one line per step outside a terminal);
* :mod:`~grove.infra.plotting`: ``grove plot``;
* :mod:`~grove.infra.runtime`: torch threads and the ``host_allocator`` policy;
* :mod:`~grove.infra.precision`: bf16 autocast;
* :mod:`~grove.infra.memory_plan`: the estimate ``grove config show`` prints;
* :mod:`~grove.infra.reward_workers`: a reward's own worker process (``isolation: process``).
"""
