"""Specced doubles of Daytona's SDK. The real service cannot be reached from CI, so the
tests assert the exact SDK calls the plugin makes against ``create_autospec`` mocks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import daytona
import pytest
from daytona._async.filesystem import AsyncFileSystem
from daytona._async.process import AsyncProcess


@dataclass
class DaytonaForTests:
    """The patched ``AsyncDaytona`` class, the client it returns and the sandbox ``create`` returns."""

    cls: Any
    client: Any
    sandbox: Any
    files: dict[str, bytes]


def response(exit_code: int = 0, result: str = "") -> daytona.ExecuteResponse:
    return daytona.ExecuteResponse(exit_code=exit_code, result=result)


@pytest.fixture
def fake_daytona(monkeypatch: pytest.MonkeyPatch) -> Iterator[DaytonaForTests]:
    monkeypatch.setenv("DAYTONA_API_KEY", "dtn-test")
    sandbox = mock.create_autospec(daytona.AsyncSandbox, instance=True)
    sandbox.id = "sb-test"
    sandbox.process = mock.create_autospec(AsyncProcess, instance=True)
    sandbox.fs = mock.create_autospec(AsyncFileSystem, instance=True)
    sandbox.process.exec.return_value = response()
    files: dict[str, bytes] = {}

    async def upload(data: bytes, path: str, timeout: int = 0) -> None:
        files[path] = data

    async def download(path: str) -> bytes:
        return files.get(path, b"")

    sandbox.fs.upload_file.side_effect = upload
    sandbox.fs.download_file.side_effect = download
    with mock.patch.object(daytona, "AsyncDaytona", autospec=True) as cls:
        client = cls.return_value
        client.create.return_value = sandbox
        yield DaytonaForTests(cls, client, sandbox, files)


@pytest.fixture(name="response")
def response_fixture() -> Any:
    """``response`` for the tests (conftest modules are not importable under importlib mode)."""
    return response
