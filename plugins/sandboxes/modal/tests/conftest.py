"""Specced doubles of Modal's SDK. The real service cannot be reached from CI, so the
tests assert the exact SDK calls the plugin makes against ``create_autospec`` mocks."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import modal
import pytest
from modal.container_process import ContainerProcess
from modal.io_streams import StreamWriter
from modal.sandbox.sandbox import SandboxFilesystem


def bind_aio(instance: Any, cls: type, *names: str) -> None:
    """Give ``instance.<name>.aio`` the signature of the bound method (autospec keeps ``self`` on ``.aio``)."""
    for name in names:
        sig = inspect.signature(getattr(cls, name))
        bound = sig.replace(parameters=list(sig.parameters.values())[1:])

        async def method(*args: Any, **kwargs: Any) -> Any: ...

        method.__signature__ = bound  # type: ignore[attr-defined]
        getattr(instance, name).aio = mock.create_autospec(method)


class StreamForTests:
    """Async-iterable stand-in for a ``modal.io_streams.StreamReader`` (the real service cannot be reached here)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for i in range(0, len(self.data), 65536):
            yield self.data[i : i + 65536]


def process_for_tests(stdout: bytes = b"", stderr: bytes = b"", code: int = 0, hang: bool = False) -> Any:
    """A specced ``ContainerProcess`` with canned output (the real service cannot be reached here)."""
    proc = mock.create_autospec(ContainerProcess, instance=True)
    proc.stdout = StreamForTests(stdout)
    proc.stderr = StreamForTests(stderr)
    proc.stdin = mock.create_autospec(StreamWriter, instance=True)
    bind_aio(proc.stdin, StreamWriter, "drain")
    bind_aio(proc, ContainerProcess, "wait")

    async def wait() -> int:
        if hang:
            import asyncio

            await asyncio.sleep(3600)
        return code

    proc.wait.aio.side_effect = wait
    return proc


@dataclass
class ModalForTests:
    """The patched SDK entry points plus the sandbox instance ``Sandbox.create`` returns."""

    create: Any
    lookup: Any
    from_registry: Any
    from_dockerfile: Any
    from_aws_ecr: Any
    secret_from_name: Any
    sandbox: Any
    app: Any
    image: Any
    built: list[Any] = field(default_factory=list)


@pytest.fixture
def fake_modal(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModalForTests]:
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    app = mock.create_autospec(modal.App, instance=True)
    app.app_id = "ap-test"
    image = mock.create_autospec(modal.Image, instance=True)
    sandbox = mock.create_autospec(modal.Sandbox, instance=True)
    sandbox.object_id = "sb-test"
    bind_aio(sandbox, modal.Sandbox, "exec", "terminate", "tunnels")
    sandbox.filesystem = mock.create_autospec(SandboxFilesystem, instance=True)
    bind_aio(sandbox.filesystem, SandboxFilesystem, "write_bytes", "read_bytes")
    bind_aio(image, modal.Image, "build")
    sandbox.exec.aio.return_value = process_for_tests()
    with (
        mock.patch.object(modal.Sandbox, "create", autospec=True) as create,
        mock.patch.object(modal.App, "lookup", autospec=True) as lookup,
        mock.patch.object(modal.Image, "from_registry", autospec=True) as from_registry,
        mock.patch.object(modal.Image, "from_dockerfile", autospec=True) as from_dockerfile,
        mock.patch.object(modal.Image, "from_aws_ecr", autospec=True) as from_aws_ecr,
        mock.patch.object(modal.Secret, "from_name", autospec=True) as secret_from_name,
    ):
        create.aio.return_value = sandbox
        lookup.aio.return_value = app
        for factory in (from_registry, from_dockerfile, from_aws_ecr):
            factory.return_value = image
        yield ModalForTests(create, lookup, from_registry, from_dockerfile, from_aws_ecr, secret_from_name, sandbox, app, image)


@pytest.fixture(name="process_for_tests")
def process_for_tests_fixture() -> Any:
    """``process_for_tests`` for the tests (conftest modules are not importable under importlib mode)."""
    return process_for_tests
