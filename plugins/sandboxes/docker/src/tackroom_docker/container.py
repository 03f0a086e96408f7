"""One trial's container as the docker sandbox's parts see it: the handle :class:`~tackroom_docker.sandbox.DockerSandbox`
holds and gives to its grader (:mod:`tackroom_docker.grading`) and its tool restorer (:mod:`tackroom_docker.tools`).

It knows the container's name, its PID 1 on the host (root helpers enter its namespaces), the image and working
directory, what grading keeps (services, ``grading_paths``, the grader's network), and it runs the plugin's own sh
scripts as root with the toolset (:meth:`Container.root_exec`). Everything here is public: the parts read it, the
sandbox writes it.
"""

from __future__ import annotations

import json
import posixpath
import re
import secrets
from pathlib import Path
from typing import Any, Literal

from tackroom import SandboxError, SandboxPathError, SandboxSpec, check_relative_inside
from tackroom_docker.engine import CallResult, DockerCLI
from tackroom_docker.images import ResolvedImage
from tackroom_docker.options import DockerOptions
from tackroom_docker.processes import FREEZE_ALL
from tackroom_docker.toolset import run_in_container

GradingNet = Literal["container", "host", "isolated"]


def container_name(spec: SandboxSpec) -> str:
    """A docker-safe, unique name derived from the trial name."""
    slug = re.sub(r"[^a-zA-Z0-9_.-]+", "-", spec.name).strip("-.")[:80] or "sandbox"
    return f"tackroom-{slug}-{secrets.token_hex(3)}"


class Container:
    """A trial's container, started or not; see the module docstring."""

    def __init__(self, spec: SandboxSpec, options: DockerOptions, cli: DockerCLI, notes: list[str]) -> None:
        self.spec = spec
        self.options = options
        self.cli = cli
        self.notes = notes
        """The sandbox's notes (the same list): what a part did that the trial's notes should say."""
        self.name = container_name(spec)
        self.image: ResolvedImage | None = None
        self.workdir = spec.workdir
        """The container's working directory (the Dockerfile's WORKDIR unless the spec sets one)."""
        self.pid = 0
        """The host pid of the container's PID 1: root helpers enter its namespaces."""
        self.started = False
        self.stopped = False
        self.kept: list[int] = []
        """Processes kill_processes(keep_listening=True) kept (pids in the container), frozen between grader commands."""
        self.keep: list[str] = []
        """The task's grading_paths (restore_image_tools' ``keep``): the agent's to change, also while grading."""
        self.grading_net: GradingNet = "container"
        """The network run_grader's command gets: the container's, the host's ("host"), or loopback only ("isolated")."""

    def require_started(self) -> None:
        if self.stopped:
            raise SandboxError(f"sandbox {self.name} has been stopped")
        if not self.started:
            raise SandboxError(f"sandbox {self.name} is not started; call start() first")

    def resolve(self, path: str) -> str:
        """Absolute container path; relative paths are taken from the working directory; ``..`` is refused."""
        if not isinstance(path, str) or not path:
            raise SandboxPathError(f"invalid sandbox path {path!r}")
        if ".." in path.split("/"):
            raise SandboxPathError(f"path {path!r} contains '..'; use an absolute path without parent references")
        return check_relative_inside(path if path.startswith("/") else posixpath.join(self.workdir, path))

    async def root_exec(
        self, script: str, *args: str, timeout: float, stdout_path: Path | None = None, stdin: bytes | None = None
    ) -> CallResult:
        """Run one of this plugin's sh scripts as root from ``/`` with the toolset (:mod:`tackroom_docker.toolset`):
        nothing of the agent's PATH, shell or /etc/passwd is used, and the pids limit does not apply."""
        result = await run_in_container(self.pid, script, *args, timeout=timeout, stdin=stdin, stdout_path=stdout_path)
        if result.returncode != 0 and "nsenter:" in result.err:
            await self.raise_if_gone(result)
            raise SandboxError(f"could not enter the namespaces of container {self.name}: {result.describe()}")
        return result

    async def freeze_all(self) -> None:
        """Stop every process but PID 1 (after a grader command that did not end on its own)."""
        try:
            await self.root_exec(FREEZE_ALL, timeout=self.options.cli_timeout_sec)
        except SandboxError:
            pass  # the container is gone: nothing runs

    async def state(self) -> dict[str, Any] | None:
        result = await self.cli.run(["inspect", "--format", "{{json .State}}", self.name], timeout=self.options.cli_timeout_sec)
        return json.loads(result.stdout) if result.ok else None

    async def raise_if_gone(self, failed: CallResult | None = None) -> None:
        """Raise :class:`SandboxError` when the container is gone or stopped; return when it runs."""
        self.check_state(await self.state(), failed)

    async def raise_if_gone_or(self, failed: CallResult, message: str) -> None:
        """:meth:`raise_if_gone`, else a :class:`SandboxError` saying ``message`` and how ``failed`` failed."""
        await self.raise_if_gone(failed)
        raise SandboxError(f"{message}: {failed.describe()}")

    def check_state(self, state: dict[str, Any] | None, failed: CallResult | None = None) -> None:
        if state is None:
            detail = f" ({failed.err})" if failed is not None else ""
            raise SandboxError(f"the container {self.name} no longer exists{detail}; the trial will be retried")
        if not state.get("Running"):
            why = f"exit code {state.get('ExitCode')}"
            if state.get("OOMKilled"):
                why += f", killed for exceeding its {self.spec.memory_mb} MB memory limit"
            if state.get("Error"):
                why += f", {state['Error']}"
            raise SandboxError(f"the container {self.name} is not running ({why}); the trial will be retried")
