"""A package's public names loaded on first access (PEP 562), declared once.

Every ``tackroom`` command loads every installed plugin's registration, so a plugin's package must import
cheaply. One table, module → names, says where each public name lives (its module loads when one is first
used); the package's ``__getattr__``, ``__dir__`` and ``__all__`` come from it::

    _EXPORTS = tackroom.LazyExports(__name__, {
        "tackroom_foo.harness": ["FooHarness", "FooOptions"],
    })
    __getattr__, __dir__, __all__ = _EXPORTS.getattr, _EXPORTS.dir, _EXPORTS.names
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from importlib import import_module
from typing import Any


class LazyExports(Mapping[str, str]):
    """Public name → the module that defines it, for the package ``package``; loaded on first access.

    ``modules`` maps full module names to the names each defines; a name listed under two modules is a
    :class:`ValueError` at import. ``extra`` names defined in the package itself join :attr:`names`.
    """

    def __init__(self, package: str, modules: Mapping[str, Iterable[str]], *, extra: Iterable[str] = ()) -> None:
        self.package = package
        self._where: dict[str, str] = {}
        for module, names in modules.items():
            for name in names:
                if name in self._where:
                    raise ValueError(f"{package}: {name!r} is listed under both {self._where[name]} and {module}")
                self._where[name] = module
        self.names: list[str] = sorted({*self._where, *extra})
        """The package's ``__all__``."""

    def __getitem__(self, name: str) -> str:
        return self._where[name]

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._where))

    def __len__(self) -> int:
        return len(self._where)

    def getattr(self, name: str) -> Any:
        """The package's ``__getattr__``: import the module that defines ``name`` and keep the value in the package,
        so the next access is a plain attribute."""
        module = self._where.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[self.package], name, value)
        return value

    def dir(self) -> list[str]:
        """The package's ``__dir__``: what it defines plus every lazy name."""
        return sorted({*vars(sys.modules[self.package]), *self._where})
