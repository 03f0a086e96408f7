"""The losses as tackroom plugins: discovered, conformant, configurable, and lazy about torch."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tackroom
import tackroom_app
import tackroom_losses
from tackroom.testing import check_registered

NAMES = ["ppo_clip", "dppo", "glm5"]
REGISTRY = Path(tackroom.__file__).parent / "registry.toml"


@pytest.mark.parametrize("name", NAMES)
def test_conforms(name):
    spec = check_registered("loss", name, distribution="tackroom-losses")
    assert isinstance(spec, tackroom.LossSpec)
    assert callable(spec.load())
    assert spec.fn.startswith("tackroom_losses.")  # lazy: a reference, not the function


def test_listing_the_losses_does_not_import_torch():
    code = (
        "import sys, tackroom_app\n"
        "m = tackroom_app.PluginManager(env={})\n"
        "names = sorted(e.name for e in m.entries('loss'))\n"
        "print(names, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['dppo', 'glm5', 'ppo_clip'] False"


def test_tackroom_plugins_lists_them_without_importing_torch():
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "tackroom_app", "plugins", "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"glm5"' in out.stdout and '"tackroom-losses"' in out.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines() if "|" in line}
    assert "tackroom_losses" in imported
    assert "torch" not in imported


def test_selected_by_name_with_validated_options():
    spec, options = tackroom_app.instantiate("loss", tackroom_app.PluginSelection(name="dppo", divergence="binary_kl",
                                                                         delta_high=0.2, aggregation="prompt_mean"))
    assert spec.name == "dppo"
    assert isinstance(options, tackroom_losses.DppoOptions)
    assert (options.divergence, options.delta_low, options.delta_high) == ("binary_kl", 0.15, 0.2)
    assert options.aggregation == "prompt_mean"


def test_a_misspelt_option_names_its_path():
    with pytest.raises(tackroom.ConfigError, match="loss.delta_hgih: unknown field"):
        tackroom_app.instantiate("loss", tackroom_app.PluginSelection(name="dppo", delta_hgih=0.2))


def test_a_misspelt_aggregation_is_refused():
    with pytest.raises(tackroom.ConfigError, match="loss.aggregation"):
        tackroom_app.instantiate("loss", tackroom_app.PluginSelection(name="glm5", aggregation="prompt_means"))


def test_catalogue_lists_every_loss_as_registered():
    listed = {p["name"]: p for p in tomllib.loads(REGISTRY.read_text())["plugin"] if p["kind"] == "loss"}
    for spec in tackroom_losses.SPECS:
        entry = listed[spec.name]
        assert entry["distribution"] == "tackroom-losses" and entry["entry_point"] == "losses"
        assert entry["summary"] == spec.summary


def test_each_loss_declares_how_it_runs_on_the_trainer_backends():
    """``LossSpec.mappings``: SkyRL's AlgorithmConfig fields (read back by ``LossOptions.from_config``) and the Tinker
    built-in each loss equals on-policy, as functions of the options; no torch imported."""
    specs = {spec.name: spec for spec in tackroom_losses.SPECS}
    dppo = tackroom_losses.DppoOptions(divergence="binary_kl", delta_low=0.1)
    assert specs["dppo"].mapping("skyrl")(dppo) == {"dppo.dppo_type": "binary_kl", "dppo.delta_low": 0.1,
                                                    "dppo.delta_high": 0.15}
    assert specs["dppo"].mapping("tinker")(dppo) == ("importance_sampling", None)
    assert specs["glm5"].mapping("tinker")(tackroom_losses.Glm5Options()) == ("importance_sampling", None)
    ppo = tackroom_losses.PpoClipOptions(eps_clip_high=0.28)
    assert specs["ppo_clip"].mapping("skyrl")(ppo) == {"eps_clip_low": 0.2, "eps_clip_high": 0.28}
    assert specs["ppo_clip"].mapping("tinker")(ppo) == (
        "ppo", {"clip_low_threshold": pytest.approx(0.8), "clip_high_threshold": pytest.approx(1.28)})
    assert all(set(spec.mappings) == {"skyrl", "tinker"} for spec in specs.values())
