"""Test-wide settings.

Tests run torch on one thread: the models are tiny, and on a 2-core machine two OpenMP threads
spin-wait whenever any other process uses the CPU, which made single tests 100× slower.
"""

import torch

torch.set_num_threads(1)


import pytest  # noqa: E402

from grove.models.pretrained import load_policy  # noqa: E402
from grove.models.tiny import create_tiny_model_dir  # noqa: E402


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory):
    """A tiny random fp32 model and its tokenizer, with peaky output distributions (initializer_range=0.2)."""
    path = create_tiny_model_dir(tmp_path_factory.mktemp("tiny") / "model", initializer_range=0.2)
    return load_policy(path)
