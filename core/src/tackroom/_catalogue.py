"""``registry.toml``: the catalogue of known plugins, installed or not."""

from __future__ import annotations

import os
import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from tackroom._errors import ConfigError
from tackroom._plugin import PluginKind

CATALOGUE_ENV = "TACKROOM_REGISTRY"


def _install_line(install: str | None, path: str | None, distribution: str, requires: list[str]) -> str:
    """How to install a catalogued plugin or command: its own line, else a path install from a checkout
    (first-party distributions are not on PyPI yet; the folders of the first-party distributions it needs
    come first), else ``pip install <distribution>``."""
    if install:
        return install
    if path:
        folders = " ".join(f"./{p}" for p in [*requires, path])
        return f"pip install {folders} (from a checkout of the tackroom repository)"
    return f"pip install {distribution}"


class CatalogueEntry(BaseModel):
    """A plugin the project knows about."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: PluginKind
    distribution: str
    entry_point: str
    summary: str
    party: Literal["first", "third"] = "first"
    install: str | None = None
    """How to install it, when neither of the lines below is it."""
    path: str | None = None
    """First-party plugins: the distribution's folder in the tackroom repository. They are not on
    PyPI yet, so the install line is a path install from a checkout of the repository."""
    requires: list[str] = []
    """The folders of the first-party distributions it depends on (not on PyPI either), installed with it."""

    @property
    def install_hint(self) -> str:
        return _install_line(self.install, self.path, self.distribution, self.requires)


class CatalogueCommand(BaseModel):
    """A ``tackroom`` sub-command that lives in another distribution (added through ``tackroom_commands``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    distribution: str
    summary: str
    path: str | None = None
    """The distribution's folder in the tackroom repository (a path install until it is on PyPI)."""
    requires: list[str] = []
    """As :attr:`CatalogueEntry.requires`."""
    install: str | None = None

    @property
    def install_hint(self) -> str:
        return _install_line(self.install, self.path, self.distribution, self.requires)


class Catalogue(BaseModel):
    model_config = ConfigDict(extra="forbid")

    plugin: list[CatalogueEntry]
    command: list[CatalogueCommand] = []


def catalogue_text() -> tuple[str, str]:
    override = os.environ.get(CATALOGUE_ENV)
    if override:
        path = Path(override)
        if not path.is_file():
            raise ConfigError(f"{CATALOGUE_ENV}={override}: no such file")
        return path.read_text(encoding="utf-8"), str(path)
    ref = resources.files("tackroom").joinpath("registry.toml")
    return ref.read_text(encoding="utf-8"), str(ref)


@lru_cache(maxsize=4)
def _parse(text: str, where: str) -> Catalogue:
    try:
        return Catalogue.model_validate(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise ConfigError(f"{where}: invalid plugin catalogue: {exc}") from exc


def load_catalogue() -> tuple[CatalogueEntry, ...]:
    """Plugin entries of the packaged ``registry.toml`` (or ``$TACKROOM_REGISTRY``)."""
    return tuple(_parse(*catalogue_text()).plugin)


def catalogue_commands() -> tuple[CatalogueCommand, ...]:
    """The ``[[command]]`` entries: sub-commands other distributions add, and how to install each."""
    return tuple(_parse(*catalogue_text()).command)
