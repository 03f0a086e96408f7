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


class CatalogueCommand(BaseModel):
    """A ``tackroom`` sub-command that lives in another distribution (added through ``tackroom_commands``)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    distribution: str
    summary: str
    install: str | None = None
    """How to install it, when neither of the lines below is it."""
    path: str | None = None
    """First-party distributions: the folder in the tackroom repository. They are not on PyPI yet, so the
    install line is a path install from a checkout of the repository."""
    requires: list[str] = []
    """The folders of the first-party distributions it depends on (not on PyPI either), installed with it."""

    @property
    def install_hint(self) -> str:
        """Its own install line, else a path install (the folders it requires first), else ``pip install``."""
        if self.install:
            return self.install
        if self.path:
            folders = " ".join(f"./{p}" for p in [*self.requires, self.path])
            return f"pip install {folders} (from a checkout of the tackroom repository)"
        return f"pip install {self.distribution}"


class CatalogueEntry(CatalogueCommand):
    """A plugin the project knows about."""

    kind: PluginKind
    entry_point: str
    party: Literal["first", "third"] = "first"


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
