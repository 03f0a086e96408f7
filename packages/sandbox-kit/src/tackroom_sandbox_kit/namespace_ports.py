"""What a sandbox whose network namespace is a host process's serves into it from tackroom's process: the phase's
allowlist (an egress proxy, :mod:`tackroom_sandbox_kit.egress`) and the host ports a harness forwards in
(:mod:`tackroom_sandbox_kit.host_forward`). Nothing of either runs inside the sandbox. A part the sandbox holds
(``self.ports = NamespacePorts(...)``); local and docker do."""

from __future__ import annotations

from collections.abc import Mapping

from tackroom import NetworkPolicy, SandboxError
from tackroom_sandbox_kit.egress import EgressProxy, serve_egress
from tackroom_sandbox_kit.host_forward import HostPortForward, forward_into_namespace


class NamespacePorts:
    """The egress proxy of the current phase's :attr:`policy` and the forwards opened into the namespace of the
    process they are given; the proxy's refusals go into ``notes`` when it closes. ``enter_user``: that process
    is in a user namespace to enter first (local's bwrap), or not (a docker container's PID 1)."""

    def __init__(self, policy: NetworkPolicy, *, notes: list[str], hosts: Mapping[str, str] | None = None,
                 enter_user: bool = True) -> None:
        self.policy = policy
        """The phase's network (the agent's, then what ``set_network`` set)."""
        self.hosts, self.notes, self.enter_user = hosts, notes, enter_user
        self._egress: EgressProxy | None = None
        self._forwards: list[HostPortForward] = []

    @property
    def env(self) -> dict[str, str]:
        """The proxy variables every command of the phase gets while an allowlist is served, else nothing."""
        return self._egress.env if self._egress is not None else {}

    async def serve(self, pid: int, *, online: bool = False) -> None:
        """Close the previous phase's proxy, then serve :attr:`policy`'s allowlist in ``pid``'s namespace (nothing
        for ``none`` or ``public``, nor while the namespace is the host's: ``online``)."""
        await self.close_egress()
        if self.policy.mode != "allowlist" or online:
            return
        try:
            self._egress = await serve_egress(pid, self.policy, enter_user=self.enter_user, hosts=self.hosts)
        except ValueError as exc:
            raise SandboxError(f"the egress proxy could not be set up: {exc}") from None

    async def close_egress(self) -> None:
        """End the proxy and every connection through it; the destinations it refused go into the notes."""
        proxy, self._egress = self._egress, None
        if proxy is None:
            return
        await proxy.close()
        if proxy.refused:
            more = len(proxy.refused) - 5
            shown = "; ".join(proxy.refused[:5]) + (f" and {more} more" if more > 0 else "")
            self.notes.append(f"the network allowlist refused {len(proxy.refused)} connection(s): {shown}")

    async def forward(self, pid: int, port: int) -> str:
        """Forward the host's ``127.0.0.1:port`` into ``pid``'s network namespace; the URL the sandbox reaches it at."""
        forward = await forward_into_namespace(pid, port, enter_user=self.enter_user)
        self._forwards.append(forward)
        return f"http://127.0.0.1:{forward.port}"

    async def close_forwards(self) -> None:
        """Close every forward :meth:`forward` opened."""
        forwards, self._forwards = self._forwards, []
        for forward in forwards:
            await forward.close()
