"""The ``docker`` sandbox provider."""

from __future__ import annotations

from typing import ClassVar

from tackroom import SandboxError, SandboxProvider, SandboxSpec
from tackroom_docker.engine import DockerCLI
from tackroom_docker.options import DockerOptions
from tackroom_docker.ownership import is_orphan
from tackroom_docker.sandbox import MANAGED_LABEL, OWNER_LABEL, DockerSandbox


class DockerProvider(SandboxProvider):
    """Docker containers: task images built from environment/, --network none, real exec timeouts.

    Each trial gets a container from the task's ``[environment].docker_image``,
    or its ``environment/Dockerfile`` built once per content hash (tagged
    ``tackroom-env:<hash>``), or ``default_image``. Containers run with
    ``--network none`` unless the task allows internet, with the task's CPU and
    memory limits (no swap beyond them), a pids limit, ``no-new-privileges`` and
    fewer capabilities, a keeper shell as PID 1 that nothing inside can signal,
    and are removed with ``docker rm -f`` when the trial ends. Commands go through
    ``docker exec`` with a timeout that kills the command inside the container;
    files move as tar streams through ``docker cp`` and never through a link the
    agent planted. README.md, "What the sandbox enforces", has the whole list.
    """

    name = "docker"
    Options: ClassVar[type[DockerOptions]] = DockerOptions  # type: ignore[assignment]
    capabilities = frozenset({"dockerfile", "network", "expose", "network_allowlist"})
    options: DockerOptions

    def __init__(self, options: DockerOptions | dict | None = None) -> None:
        super().__init__(options)
        self.cli = DockerCLI(self.options.docker_binary)

    def create(self, spec: SandboxSpec) -> DockerSandbox:
        return DockerSandbox(spec, self.options, self.cli)

    async def cleanup(self) -> int:
        """Remove containers labelled ``tackroom.managed=1`` whose creating process is gone
        (``cleanup_scope = "orphans"``, the default) or all of them (``"all"``)."""
        timeout = self.options.cli_timeout_sec
        listed = await self.cli.check(
            ["ps", "-a", "--filter", f"label={MANAGED_LABEL}=1", "--format", f'{{{{.ID}}}}\t{{{{.Label "{OWNER_LABEL}"}}}}'],
            timeout=timeout,
        )
        ids = []
        for line in listed.out.splitlines():
            cid, _, owner = line.partition("\t")
            if cid and (self.options.cleanup_scope == "all" or is_orphan(owner.strip())):
                ids.append(cid)
        if not ids:
            return 0
        removed = await self.cli.run(["rm", "-f", "-v", *ids], timeout=timeout + 2 * len(ids))
        if not removed.ok and "No such container" not in removed.err:
            raise SandboxError(f"could not remove leaked containers: {removed.describe()}")
        return len([line for line in removed.out.splitlines() if line.strip()])
