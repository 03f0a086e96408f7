"""``upload``/``download`` for sandboxes whose provider moves only whole files (Modal, Daytona, …).

A directory travels as one tar archive staged under ``/tmp`` in the sandbox and
unpacked (or packed) there with ``tar``; a single file travels as itself. The
sandbox class supplies ``_put(data, remote, timeout)``, ``_get(remote, timeout)``
and ``_resolve(path)`` (a sandbox path made absolute) besides ``exec``.
"""

from __future__ import annotations

import io
import posixpath
import secrets
import shlex
import tarfile
from pathlib import Path
from typing import Any

from tackroom.sandbox import SandboxError


class TarTransfer:
    """Mix into a :class:`~tackroom.sandbox.Sandbox` before it: ``class MySandbox(TarTransfer, Sandbox)``.

    No stand-ins for ``_put``/``_get``/``_resolve``/``exec`` here: a concrete one would hide a missing
    ``exec`` from the ``Sandbox`` ABC.
    """

    _put: Any
    _get: Any
    _resolve: Any
    exec: Any

    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        target = self._resolve(dest)
        if not source.exists():
            raise FileNotFoundError(source)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            if source.is_dir():
                for child in sorted(source.iterdir()):
                    tar.add(child, arcname=child.name)
                extract_to = target
            else:
                tar.add(source, arcname=posixpath.basename(target))
                extract_to = posixpath.dirname(target)
        staged = f"/tmp/.tackroom-up-{secrets.token_hex(6)}.tar"
        await self._put(buf.getvalue(), staged, timeout)
        r = await self.exec(
            f"mkdir -p {shlex.quote(extract_to)} && tar --no-same-owner -xf {staged} -C {shlex.quote(extract_to)}; s=$?; rm -f {staged}; exit $s",
            timeout=timeout,
        )
        if not r.ok:
            raise SandboxError(f"upload to {target} failed: {r.stderr.strip()}")

    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        path = self._resolve(source)
        staged = f"/tmp/.tackroom-down-{secrets.token_hex(6)}.tar"
        q = shlex.quote(path)
        r = await self.exec(
            f"if [ -d {q} ]; then tar -cf {staged} -C {q} . && echo dir; elif [ -e {q} ]; then echo file; else echo missing; fi",
            timeout=timeout,
        )
        kind = r.stdout.strip()
        if kind == "missing":
            raise FileNotFoundError(f"{source} does not exist in the sandbox")
        if kind == "file":
            data = await self._get(path, timeout)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            return
        if kind != "dir":
            raise SandboxError(f"download of {source} failed: {r.stderr.strip() or r.stdout.strip()}")
        try:
            data = await self._get(staged, timeout)
        finally:
            await self.exec(f"rm -f {staged}", timeout=30)
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
