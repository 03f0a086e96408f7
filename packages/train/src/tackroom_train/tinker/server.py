"""SkyRL's Tinker API server with its JAX backend, started for a run and stopped after it.

The server lives in its own uv project (``~/.cache/tackroom/tinker-server``, or
``$TACKROOM_TINKER_SERVER_DIR``) because of how it starts its engine: the API
process reads its *parent's* command line, expects ``uv run <flags> -m
skyrl.tinker.api`` there, and launches ``uv run <flags> --extra tinker --extra
<backend> -m skyrl.tinker.engine``. So the project must define the extras
``tinker`` and ``jax`` itself, and we must start it exactly with ``uv run
--project DIR --extra tinker --extra jax -m skyrl.tinker.api``. The project also
lists ``aiohttp``, which ``skyrl[tinker]`` 0.4.0 needs but does not declare.
JAX, flax and optax stay out of the tackroom workspace.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tackroom import InfraError, cache_root
from tackroom_train.config_tinker import TinkerSettings

SKYRL_VERSION = "0.4.0"

PYPROJECT = f"""\
# Written by tackroom (tackroom_train.tinker.server): SkyRL's Tinker API server with the JAX backend.
# The API server relaunches its engine with `uv run <our flags> --extra tinker --extra jax`,
# so the extras must exist here. aiohttp: skyrl[tinker] {SKYRL_VERSION} needs it and does not declare it.
[project]
name = "tackroom-tinker-server"
version = "0"
requires-python = ">=3.12,<3.13"
dependencies = ["skyrl=={SKYRL_VERSION}", "aiohttp"]

[project.optional-dependencies]
tinker = ["skyrl[tinker]=={SKYRL_VERSION}"]
jax = ["skyrl[jax]=={SKYRL_VERSION}"]

[tool.uv]
package = false
"""


class TinkerServerError(InfraError):
    """The Tinker API server could not be prepared, started or reached."""


def server_dir(settings: TinkerSettings | None = None) -> Path:
    if settings is not None and settings.server_dir:
        return Path(settings.server_dir).expanduser()
    env = os.environ.get("TACKROOM_TINKER_SERVER_DIR")
    return Path(env).expanduser() if env else cache_root() / "tinker-server"


def jax_cache_dir(settings: TinkerSettings | None = None) -> Path:
    """Where the server's JAX compilation cache lives (``$JAX_COMPILATION_CACHE_DIR`` overrides it)."""
    return server_dir(settings) / "jax-cache"


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        raise TinkerServerError("the Tinker server is started with `uv run`, and uv is not on PATH (pip install uv)")
    return uv


def _uv_env() -> dict[str, str]:
    """This process's environment without the workspace's venv, so uv uses the server's own project."""
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}


def prepare(settings: TinkerSettings | None = None, *, timeout: float = 1800.0) -> Path:
    """Write the server's uv project and sync it (downloads JAX and SkyRL's extras on first use)."""
    d = server_dir(settings)
    d.mkdir(parents=True, exist_ok=True)
    pyproject = d / "pyproject.toml"
    if not pyproject.is_file() or pyproject.read_text() != PYPROJECT:
        pyproject.write_text(PYPROJECT)
    (d / ".python-version").write_text("3.12\n")
    proc = subprocess.run([_uv(), "sync", "--project", str(d), "--extra", "tinker", "--extra", "jax", "--quiet"],
                          capture_output=True, text=True, timeout=timeout, env=_uv_env())
    if proc.returncode != 0:
        raise TinkerServerError(f"could not install the Tinker server's environment in {d}: "
                                f"uv sync exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return d


def _free_port(avoid: frozenset[int] = frozenset()) -> int:
    """A port free now, none of ``avoid``: the run's engine is told its port before it binds it, and a port
    free until then can be handed out here (it was once: both listened on it, and the engine's /health
    reached this server's 404 until the start timed out)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


class TinkerServer:
    """One SkyRL Tinker API server (JAX backend) for one run: ``with TinkerServer(...) as url: ...``.

    ``state_dir`` holds its SQLite database, checkpoints and ``server.log``.
    """

    def __init__(self, settings: TinkerSettings, base_model: str, state_dir: str | Path) -> None:
        self.settings = settings
        self.base_model = base_model
        self.state_dir = Path(state_dir)
        self.port = settings.port or _free_port(frozenset({settings.engine_port}))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "server.log"

    def command(self, project: Path) -> list[str]:
        argv = [_uv(), "run", "--project", str(project), "--extra", "tinker", "--extra", "jax",
                "-m", "skyrl.tinker.api", "--backend", "jax", "--base-model", self.base_model,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--database-url", f"sqlite:///{(self.state_dir / 'tinker.db').resolve()}",
                "--checkpoints-base", str((self.state_dir / "checkpoints").resolve()),
                "--external-inference-lora-base", str((self.state_dir / "lora").resolve())]
        if self.settings.backend_config:
            argv += ["--backend-config", json.dumps(self.settings.backend_config)]
        return argv

    def start(self) -> str:
        if not Path(self.base_model).is_dir():
            raise TinkerServerError(f"the Tinker JAX backend loads a local HF model folder; {self.base_model} is not one")
        project = prepare(self.settings)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = _uv_env()
        if not shutil.which("nvidia-smi"):
            env.setdefault("JAX_PLATFORMS", "cpu")  # no probing for accelerators that are not there
        # JAX's persistent compilation cache, kept beside the server's project: the backend compiles its sampler
        # once per prompt-length bucket (minutes each on a small CPU); later runs and arms load the kernels instead
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(jax_cache_dir(self.settings)))
        self.proc = subprocess.Popen(self.command(project), stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.state_dir, start_new_session=True)
        log.close()
        self._wait_ready()
        return self.url

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise TinkerServerError(f"the Tinker server exited with {self.proc.returncode} while starting; "
                                        f"last lines of {self.log_path}:\n{self.tail()}")
            try:
                if httpx.get(f"{self.url}/api/v1/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise TinkerServerError(f"the Tinker server did not answer on {self.url} within "
                                f"{self.settings.startup_timeout_s:.0f}s; see {self.log_path}:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the API server and the engine it started (one process group)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> str:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """Fail fast when nothing answers at ``url`` (the Tinker SDK would retry for ever)."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/api/v1/healthz", timeout=timeout)
    except httpx.HTTPError as exc:
        raise TinkerServerError(f"no Tinker server answers at {url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise TinkerServerError(f"the Tinker server at {url} is not healthy: HTTP {response.status_code} "
                                f"{response.text[:300]}")


class TinkerCalls:
    """Every call to the Tinker server goes through here: bounded by ``request_timeout_s``, and cut short when the
    server we started exits (its log's last lines in the error). SDK errors become :class:`TinkerServerError`."""

    def __init__(self, settings: TinkerSettings, server: TinkerServer | None = None, poll_s: float = 1.0) -> None:
        self.timeout = settings.request_timeout_s
        self.server = server
        self.poll_s = poll_s

    def _died(self) -> str | None:
        proc = self.server.proc if self.server is not None else None
        if proc is None or proc.poll() is None:
            return None
        return f"the Tinker server exited with {proc.returncode}; last lines of {self.server.log_path}:\n{self.server.tail()}"

    async def __call__(self, what: str, awaitable: Any) -> Any:
        task = asyncio.ensure_future(awaitable)
        deadline = time.monotonic() + self.timeout
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.poll_s)
                if done:
                    break
                if (died := self._died()) is not None:
                    raise TinkerServerError(f"{what}: {died}")
                if time.monotonic() > deadline:
                    raise TinkerServerError(f"{what}: no answer from the Tinker server within {self.timeout:.0f}s "
                                            "([tinker] request_timeout_s)")
        finally:
            if not task.done():
                task.cancel()
        try:
            return task.result()
        except TinkerServerError:
            raise
        except Exception as exc:
            died = self._died()
            detail = f"; {died}" if died else ""
            if "RESOURCE_EXHAUSTED" in str(exc):
                detail += ("; the JAX backend ran out of memory: long sequences need [tinker] backend_config = "
                           "{ train_micro_batch_size = 1, gradient_checkpointing = true } (or a lower [sft] max_length "
                           "/ [train] max_prompt_length)")
            raise TinkerServerError(f"{what} failed: {type(exc).__name__}: {exc}{detail}") from exc


if __name__ == "__main__":  # `python -m tackroom_train.tinker.server`: install the server's environment ahead of time
    print(prepare())
