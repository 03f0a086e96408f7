"""benchmarks/gpu_train_e2e.py stays runnable as the packages move: it stages tackroom's packages as wheels for a
machine that reaches no index, writes a train config there, and pre-builds the world's site where archipelago looks.
Each went stale once unnoticed (a package list without ``tackroom-app``, a site under an old key) and cost a GPU call
to find. Nothing here stages or runs: the script is imported."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from tackroom_app import PluginSelection, instantiate
from tackroom_archipelago.world import GATEWAY_REQUIREMENTS, SandboxPython, load_world, site_dir
from tackroom_train.config import load_train_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("gpu_train_e2e", ROOT / "benchmarks" / "gpu_train_e2e.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def tackroom_dependencies(folder: Path) -> set[str]:
    names = {re.split(r"[\s<>=!~;\[(]", dep, maxsplit=1)[0].lower() for dep in project(folder).get("dependencies", [])}
    return {n for n in names if n.startswith("tackroom")}


def test_every_tackroom_package_a_staged_one_needs_is_staged(script):
    folders = {project(p.parent)["name"]: p.parent.relative_to(ROOT).as_posix()
               for p in [ROOT / "core" / "pyproject.toml", *ROOT.glob("packages/*/pyproject.toml"),
                         *ROOT.glob("plugins/*/*/pyproject.toml")]}
    staged = set(script.PACKAGES)
    missing = {f"{folders[dep]} (for {folder})" for folder in staged
               for dep in tackroom_dependencies(ROOT / folder) if folders[dep] not in staged}
    assert not missing, f"benchmarks/gpu_train_e2e.py PACKAGES lacks {sorted(missing)}"


def test_the_world_site_is_where_archipelago_looks(script, tmp_path):
    world = tmp_path / "world"
    (world / "files").mkdir(parents=True)
    (world / "world.toml").write_text(  # what `stage` writes, the part that decides the site
        f'[world]\nname = "notes"\n[runtime]\nrequirements = {script.json.dumps(script.SITE_REQUIREMENTS)}\n'
        '[[servers]]\nname = "files"\nmodule = "acme_mcp.filesystem"\n')
    spec = load_world(world)
    python = SandboxPython(executable="python3", major=3, minor=12, machine="x86_64", libc="glibc", libc_version="2.39")
    expected = site_dir([*GATEWAY_REQUIREMENTS, *spec.runtime.requirements], python, tmp_path / "worlds" / "sites")
    assert script.world_site(tmp_path, "python3", 3, 12, "x86_64", "glibc", "2.39") == (expected, "3.12")


@pytest.mark.parametrize("sft", [None, Path("/stage/codex.jsonl")], ids=["rl", "sft"])
def test_the_config_it_writes_loads_and_builds_its_harness(script, tmp_path, sft):
    (tmp_path / "tasks").mkdir()
    config = tmp_path / "gpu.toml"
    config.write_text(script.config_toml(tmp_path, steps=2, max_tokens=64, sft=sft))
    loaded = load_train_config(config)
    instantiate("harness", PluginSelection(name=loaded.harness.name, options=loaded.harness.options))
    assert (loaded.sft is not None) == (sft is not None)
    if sft is not None:
        assert loaded.sft.then_rl is False and loaded.sft.batch_size == 8


def test_the_sft_block_is_the_lookup_bash_warm_start(script):
    """The GPU figures are compared with examples/train/lookup-bash.toml's run on the CPU: the script's ``[sft]``
    settings must be that example's (only the dataset's path and ``then_rl`` are the call's)."""
    example = tomllib.loads((ROOT / "examples" / "train" / "lookup-bash.toml").read_text())["sft"]
    written = tomllib.loads(script.SFT_TOML.format(dataset="/stage/codex.jsonl", then_rl="false"))["sft"]
    assert {k: v for k, v in written.items() if k != "dataset"} == {k: v for k, v in example.items() if k != "dataset"}
