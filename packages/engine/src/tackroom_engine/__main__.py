"""``python -m tackroom_engine up|down|status``: the ``tackroom model`` commands without the ``tackroom`` CLI.

``scripts/setup`` starts the engine this way from a workspace synced with this package alone, while the rest of the
workspace is still being installed.
"""

from tackroom_engine.cli import model_app

model_app(prog_name="python -m tackroom_engine")
