"""The ``tackroom`` command. Each sub-command lives in its own module and attaches to :data:`app`."""
