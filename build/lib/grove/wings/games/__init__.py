"""Text games: gymnasium's toy-text worlds (FrozenLake, CliffWalking, Taxi) as text grids, Sokoban rooms generated
by reverse play, and TextWorld adventures (``grove[games]``; TextWorld: ``grove[textworld]``; docs/environments.md)."""
