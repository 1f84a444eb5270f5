"""A user environment whose factory validates its parameters with a pydantic model (loaded by import path
``strict_envs:strict_corridor``), for the start-up checks of tests/test_startup_checks.py."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agent_envs import corridor
from grove.envs.base import EnvironmentSuite


class CorridorParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    length: int = 3


def strict_corridor(params: CorridorParams) -> EnvironmentSuite:
    return corridor({"length": params.length})
