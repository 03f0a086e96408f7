"""The static busybox folder every docker helper mounts: made once per busybox build, whatever the concurrency."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tackroom import ConfigError
from tackroom.testing import skip_or_fail
from tackroom_docker.toolset import find_busybox, toolset_dir


def test_trials_and_processes_starting_together_on_an_empty_cache_share_one_toolset(tmp_path, monkeypatch):
    """Two docker trials at --concurrency 2 on a cold cache both built `<hash>.tmp-<pid>` (one name per process) and
    removed each other's work: FileNotFoundError / FileExistsError, ended as infra."""
    try:
        busybox = find_busybox()
    except ConfigError as exc:  # scripts/setup installs busybox-static
        skip_or_fail(f"no static busybox: {exc}")
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path / "cache"))
    with ThreadPoolExecutor(8) as pool:
        roots = list(pool.map(lambda _: toolset_dir(busybox), range(8)))
    [root] = set(roots)
    assert (root / "bin" / "sh").is_symlink() and os.access(root / "bin" / "busybox", os.X_OK)
    assert (root / "stage").is_dir() and oct(root.stat().st_mode & 0o777) == "0o755"
    assert [p.name for p in root.parent.iterdir() if not p.name.startswith(".")] == [root.name]  # no tmp left behind
    # a half-made folder (its builder died before the links) is rebuilt, not used
    for link in (root / "bin").iterdir():
        if link.is_symlink():
            link.unlink()
    assert toolset_dir(busybox) == root and (Path(root) / "bin" / "sh").is_symlink()
