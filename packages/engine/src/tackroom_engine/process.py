"""Starting and stopping a local engine: vLLM's OpenAI server for a settings object, as its own process group,
waited on until healthy; stopped with its whole group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tackroom import ConfigError, cache_root
from tackroom_engine.install import ensure_model, ensure_venv
from tackroom_engine.settings import DEFAULT_PORT, EngineError, EngineSettings, engine_dir
from tackroom_engine.state import (
    EngineState,
    _alive,
    _forget,
    _group_members,
    _proc_start,
    engines,
    healthy,
    log_file,
    read_state,
    state_file,
)


def _port_in_use(host: str, port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def check_model_folder(path: Path) -> Path:
    """A local HF folder vLLM can load: ``config.json`` and safetensors weights."""
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {path}: not a Hugging Face model folder (no config.json)")
    if not list(path.glob("*.safetensors")):
        raise ConfigError(f"--model {path}: no *.safetensors weights in it")
    return path


def engine_env(settings: EngineSettings) -> dict[str, str]:
    """The variables the engine process gets on top of this one's environment."""
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": "auto",
        "VLLM_USE_AOT_COMPILE": "0",
        "TORCHINDUCTOR_CACHE_DIR": str(cache_root() / "torchinductor"),
    }
    if settings.lora_rank is not None:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    return env


def engine_argv(settings: EngineSettings, python: str | Path, model: Path, template: Path | None) -> list[str]:
    """vLLM's OpenAI server command line for ``settings``."""
    lora = ([] if settings.lora_rank is None else
            ["--enable-lora", "--max-lora-rank", str(settings.lora_rank), "--max-loras", str(settings.max_loras)])
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", settings.name(),
        "--host", settings.host, "--port", str(settings.port), "--max-model-len", str(settings.max_model_len),
        *(["--chat-template", str(template)] if template is not None else []),
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
        *lora, *(["-O0"] if settings.eager else []), *settings.extra_args,
    ]


def up(settings: EngineSettings | None = None, log: Callable[[str], None] = print) -> EngineState:
    """Start the engine on ``settings.port`` (setting it up first if needed) and wait until it is healthy.

    Idempotent: an engine already serving the same folder under the same name on that port is reused;
    one serving something else there is an error (stop it first, or pick another port).
    """
    settings = settings or EngineSettings()
    if settings.model:
        check_model_folder(settings.model_path())
    template = settings.template()
    if template is not None and not template.is_file():
        raise ConfigError(f"--chat-template {template}: no such file")
    state = read_state(settings.port)
    if state is not None and _alive(state.pid, state.proc_start):
        if (state.model_path, state.model) != (str(settings.model_path()), settings.name()):
            raise EngineError(
                f"port {settings.port} already serves {state.model} ({state.model_path}); stop it with "
                f"`tackroom model down --port {settings.port}` or pick another --port"
            )
        if healthy(state.base_url):
            return state
        log(f"engine pid {state.pid} is alive but not healthy; waiting")
        return _wait_healthy(state, settings)
    if _port_in_use(settings.host, settings.port):
        raise EngineError(
            f"{settings.host}:{settings.port} is already in use by something tackroom did not start; "
            "stop it or pass --port"
        )
    # each step's wall time, so a setup's "model engine" phase can be broken down (scripts/setup prints the phases)
    t0 = time.monotonic()
    if settings.model:
        python = ensure_venv(settings, log)
        model = check_model_folder(settings.model_path())
    else:  # a new venv's import check and the model's conversion run side by side
        converted: list[Path] = []
        python = ensure_venv(settings, log, alongside=lambda py: converted.append(ensure_model(py, log)))
        model = converted[0] if converted else ensure_model(python, log)
    t_model = time.monotonic()
    engine_dir().mkdir(parents=True, exist_ok=True)
    logfile = log_file(settings.port)
    env = {**os.environ, **engine_env(settings)}
    # The engine venv's bytecode is written as its modules are first imported (uv installs without it), here
    # and by the import check; PYTHONDONTWRITEBYTECODE=1 would have each of vLLM's processes compile torch & co.
    # from source at every start instead.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = engine_argv(settings, python, model, template)
    log(f"starting vLLM serving {model} as {settings.name()!r} on {settings.base_url} (log: {logfile})")
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    state = EngineState(pid=proc.pid, base_url=settings.base_url, model=settings.name(),
                        model_path=str(model), log=str(logfile), started_at=time.time(),
                        proc_start=_proc_start(proc.pid))
    state_file(settings.port).write_text(state.model_dump_json(indent=2))
    state = _wait_healthy(state, settings)
    done = time.monotonic()
    log(f"engine up in {done - t0:.0f}s: venv and model {t_model - t0:.0f}s, vLLM start to /health "
        f"{done - t_model:.0f}s")
    return state


def _wait_healthy(state: EngineState, settings: EngineSettings) -> EngineState:
    deadline = time.monotonic() + settings.start_timeout_sec
    while time.monotonic() < deadline:
        if not _alive(state.pid, state.proc_start):
            tail = Path(state.log).read_text(errors="replace")[-3000:] if Path(state.log).exists() else ""
            _forget(state.port)
            raise EngineError(f"the engine exited during start-up; end of {state.log}:\n{tail}")
        if healthy(state.base_url):
            return state
        time.sleep(1.0)
    down(state.port)
    raise EngineError(f"the engine was not healthy after {settings.start_timeout_sec:.0f}s; see {state.log}")


def down(port: int = DEFAULT_PORT, timeout: float = 30.0) -> bool:
    """Stop the engine ``up`` started on ``port`` (its whole process group). Returns whether one was running."""
    state = read_state(port)
    if state is None:
        return False
    was_running = _alive(state.pid, state.proc_start)
    if was_running:
        # the engine is its process group's leader (start_new_session); its workers share the group
        def running() -> bool:
            return _alive(state.pid, state.proc_start) or bool(_group_members(state.pid))

        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(state.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and running():
                time.sleep(0.2)
            if not running():
                break
    _forget(port)
    return was_running


def down_all(timeout: float = 30.0) -> list[int]:
    """Stop every engine ``up`` started; the ports of those that were running."""
    return [state.port for state in engines() if down(state.port, timeout)]
