"""``python -m tackroom_app``: the ``tackroom`` command, run by the interpreter at hand (what tests and scripts use to
reach the CLI of the environment they run in)."""

from tackroom_app._cli.main import main

if __name__ == "__main__":
    main()
