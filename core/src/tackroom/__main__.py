"""``python -m tackroom``: the ``tackroom`` command, run by the interpreter at hand (what tests and scripts use to
reach the CLI of the environment they run in)."""

from tackroom._cli.main import main

if __name__ == "__main__":
    main()
