"""Lazy ``"package.module:Qual.name"`` references: how plugins name a class or function without importing it."""

from __future__ import annotations

import importlib
from typing import Any


def import_ref(reference: str) -> Any:
    """The object a ``"package.module:Qual.name"`` reference names (imports the module)."""
    module, sep, qualname = reference.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"reference {reference!r} must look like 'package.module:name'")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj
