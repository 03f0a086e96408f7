"""Optional sandbox features, checked with ``isinstance`` (``isinstance(sandbox, NetworkSwitch)``): a sandbox has one
when its class implements the feature's method; the runtime asks instead of calling and catching. What a sandbox
cannot do for a given task at all (an allowlist, an environment it cannot build) is refused before the run:
its provider's capabilities and :meth:`tackroom.SandboxProvider.refuses`."""

from tackroom._sandbox import NetworkSwitch, PortExposer, PortForwarder, ReadOnlyMounts, ServiceKeeper, ToolRestorer

__all__ = ["NetworkSwitch", "ServiceKeeper", "ToolRestorer", "PortForwarder", "PortExposer", "ReadOnlyMounts"]
