"""``python -m grove.cli``: the ``grove`` command line."""

from grove.cli import main

main()
