"""Every first-party cache lives under one root, so TACKROOM_CACHE=<empty dir> is a fresh machine (CI's)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tackroom


def test_tackroom_cache_wins_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tackroom.cache_root() == tmp_path / "explicit"
    monkeypatch.delenv("TACKROOM_CACHE")
    assert tackroom.cache_root() == tmp_path / "xdg" / "tackroom"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tackroom.cache_root() == Path.home() / ".cache" / "tackroom"


def test_every_first_party_cache_follows_tackroom_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path))
    monkeypatch.delenv("TACKROOM_TINKER_SERVER_DIR", raising=False)
    found = {}
    from tackroom_gateway import tokenizers_dir

    found["tokenizers"] = tokenizers_dir()
    for label, module, attr in (
        ("engine venv", "tackroom_engine", "venv_dir"),
        ("models", "tackroom_engine", "model_dir"),
        ("docker base images", "tackroom_docker.base_images", "cache_dir"),
        ("tinker server", "tackroom_train.tinker.server", "server_dir"),
        ("opencode", "tackroom_opencode.install", "default_cache_dir"),
        ("terminus debs", "tackroom_terminus.tmux_install", "default_cache_dir"),
    ):
        mod = pytest.importorskip(module)
        found[label] = getattr(mod, attr)()
    for label, path in found.items():
        assert Path(path).is_relative_to(tmp_path), f"{label} cache at {path}, outside TACKROOM_CACHE"
