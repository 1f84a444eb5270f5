"""Rank 1 never joins rank 0's collective: rank 0 must fail within the timeout, naming its rank and the phase
(run by tests/test_distributed_cli.py on 2 ranks)."""

import time

from grove.distributed.world import CollectiveError, init_world

world = init_world(timeout_seconds=3)
if world.rank == 0:
    try:
        world.sum_floats([1.0], "update: loss scale")
    except CollectiveError as exc:
        print(f"COLLECTIVE ERROR: {exc}", flush=True)
        raise SystemExit(3) from None
else:
    time.sleep(8)
