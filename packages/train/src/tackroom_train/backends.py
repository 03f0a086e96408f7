"""``tackroom train``'s backends behind one protocol: what the command asks a backend, and the modes a run is in.

The command (:mod:`tackroom_train.cli`) resolves the plan (:func:`~tackroom_train.plan.resolve_plan`), writes the
prompt dataset, opens the plan's backend and then only asks it: its :attr:`~Backend.view` (what ``--json``
prints), the lines of the header and of ``--dry-run``, and :meth:`~Backend.run` in a :data:`Mode`. A backend
refuses a mode it cannot run with a :class:`~tackroom.ConfigError` that says where it runs.

- ``skyrl`` (:class:`tackroom_train.launch.SkyrlBackend`): SkyRL's fully-async trainer on GPU nodes;
- ``tinker`` (:class:`tackroom_train.tinker.backend.TinkerBackend`): SkyRL's Tinker API server (JAX, on CPU),
  with the error-rate pass, ``[[arms]]`` and ``[eval]``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel

from tackroom_train.config import TrainConfig
from tackroom_train.plan import TrainPlan

Mode = Literal["train", "preflight", "eval", "arms"]
"""``preflight``: only the error-rate pass (``--preflight``); ``arms``: every ``[[arms]]`` arm and their table;
``eval``: train, then evaluate the policy (``[eval]``); ``train``: train."""

BACKENDS = {"skyrl": "tackroom_train.launch:SkyrlBackend", "tinker": "tackroom_train.tinker.backend:TinkerBackend"}
"""Each backend's class, imported when a run selects it (neither imports SkyRL's trainer or Tinker's client up front)."""


def mode_of(config: TrainConfig, *, preflight_only: bool) -> Mode:
    """The mode a config and the ``--preflight`` flag ask for: ``--preflight`` first, then arms, then ``[eval]``."""
    if preflight_only:
        return "preflight"
    if config.arms:
        return "arms"
    return "train" if config.eval is None else "eval"


@dataclass
class Output:
    """Where the command prints: ``console`` (stdout) and ``err`` (stderr), both rich consoles."""

    console: Any
    err: Any

    def say(self, text: str, **kwargs: Any) -> None:
        """A line as it is: no rich markup or highlighting (paths and configs hold brackets)."""
        self.console.print(text, markup=False, highlight=False, **kwargs)


class Backend(Protocol):
    """One way ``tackroom train`` trains, opened for a plan: ``Backend(plan, run_dir, dataset)``."""

    view: BaseModel
    """The plan as this backend maps it (nothing has run yet): what ``--json`` prints."""

    def describe(self) -> list[str]:
        """The header's lines after the task count."""
        ...

    def dry_run(self, config: TrainConfig) -> list[str]:
        """What ``--dry-run`` prints: the mapped config, checked against the plugins (``config``: the arms)."""
        ...

    def run(self, config: TrainConfig, mode: Mode, out: Output) -> int:
        """Run ``mode`` (blocks until done) and return the exit status; ``config`` is the whole config, for the
        modes that derive configs from it (arms, ``[eval]``)."""
        ...


def open_backend(plan: TrainPlan, run_dir: Path, dataset: Path) -> Backend:
    """The plan's backend, opened for the run in ``run_dir`` on the prompt dataset ``dataset``."""
    module, _, name = BACKENDS[plan.backend].partition(":")
    return getattr(importlib.import_module(module), name)(plan, run_dir, dataset)
