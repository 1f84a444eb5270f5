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


def pytest_configure(config: pytest.Config) -> None:
    """Under ``--dist loadgroup`` (make test) the tests of one ``xdist_group`` must reach one worker, which builds
    their shared module fixtures once. pytest-xdist 3.8 marks them with a node-id suffix that pytest 9.2's node ids
    ignore, and the groups are then spread over the workers without a word: stop instead."""
    if config.getoption("dist", "no") == "loadgroup" and pytest.version_tuple[:2] >= (9, 2):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} drops the node-id suffix by which pytest-xdist keeps an xdist_group on one "
            "worker: install the versions in constraints.txt (make install), pytest below 9.2"
        )
