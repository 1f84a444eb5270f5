"""``python -m grove`` (and ``torchrun --nproc-per-node N -m grove train ...``): the ``grove`` command line."""

from grove.cli import main

if __name__ == "__main__":
    main()
