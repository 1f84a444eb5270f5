"""Test-wide settings.

Tests run torch on one thread: the models are tiny, and on a 2-core machine two OpenMP threads
spin-wait whenever any other process uses the CPU, which made single tests 100× slower.
"""

import torch

torch.set_num_threads(1)
