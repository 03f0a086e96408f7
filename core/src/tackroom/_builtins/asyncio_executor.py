"""Registers the ``asyncio`` executor (attempts as coroutines in this process, the default), like any executor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tackroom._executor import AsyncioExecutor
from tackroom._markers import hookimpl

if TYPE_CHECKING:
    from tackroom._registrar import Registrar


@hookimpl
def tackroom_executors(register: Registrar) -> None:
    register.add_executor(AsyncioExecutor)
