"""One real local Ray cluster for every executor test (starting one takes 10–30 s on two cores)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import tackroom_app

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # misbehaving_harnesses, importable by name here and in the workers


@pytest.fixture(scope="module")
def ray_cluster():
    """A private local Ray cluster (2 CPUs, a ``test_slot`` resource of 2), shut down after the module.

    Not session-wide: a Ray left initialised in the test process changes how other packages behave
    (SkyRL's policy-loss registry then pickles its functions to sync them to Ray).

    Workers get this folder on their PYTHONPATH, so the harnesses in
    ``misbehaving_harnesses`` ship by reference like any installed plugin.
    """
    from tackroom_ray import RayOptions
    from tackroom_ray.executor import connect

    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    ray = connect(RayOptions(address="local", local_num_cpus=2, local_resources={"test_slot": 2},
                             runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}))
    yield ray
    ray.shutdown()


@pytest.fixture
def manager() -> tackroom_app.PluginManager:
    """A plugin manager with no entry points loaded: register test plugins on it directly."""
    return tackroom_app.PluginManager(load_entry_points=False)
