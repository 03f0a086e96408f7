"""The scratch every sandbox check gets: a leaf module, so the check modules need not import each other."""

from __future__ import annotations

import secrets
from pathlib import Path

from tackroom._sandbox import SandboxProvider, SandboxSpec


class CheckContext:
    """Per-run scratch: a unique sandbox directory, a local temp dir, the spec used, the report's timings."""

    def __init__(self, spec: SandboxSpec, local: Path, timings: dict[str, float] | None = None,
                 provider: SandboxProvider | None = None) -> None:
        self.spec = spec
        self.provider = provider
        """The provider under test (checks that need a sandbox of their own, e.g. ``disk_fill``, start one)."""
        self.local = local
        self.root = f"/tmp/tackroom-check-{secrets.token_hex(4)}"
        self.timings = timings if timings is not None else {}
