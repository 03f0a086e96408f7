"""remove_added_tooling: test tooling the agent added below a sandbox's writable roots is uninstalled, what was
there at start and what is not test tooling stays, and nothing outside the root is touched, whatever the agent's
links and RECORD say."""

from __future__ import annotations

import os
from pathlib import Path

from tackroom_sandbox_kit import dist_folders, dist_name, is_test_tooling, remove_added_tooling

SITE = "venv/lib/python3.13/site-packages"


def install(root: Path, name: str, version: str, *, entry_points: str = "", record_extra: tuple[str, ...] = (),
            site: str = SITE) -> Path:
    """A distribution as pip leaves it: its package, a console script, its dist-info with RECORD."""
    base = root / site
    package = name.replace("-", "_")
    (base / package).mkdir(parents=True, exist_ok=True)
    (base / package / "__init__.py").write_text("")
    bin_dir = root / site.split("/lib/")[0] / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / package).write_text("#!/bin/sh\nexit 0\n")
    info = base / f"{package}-{version}.dist-info"
    info.mkdir()
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in (
        f"{package}/__init__.py", f"../../../bin/{package}", f"{info.name}/RECORD", *record_extra)))
    return info


def test_names_and_what_counts_as_tooling():
    assert dist_name("pytest_json_ctrf-0.3.5.dist-info") == "pytest-json-ctrf"
    assert is_test_tooling("pytest-8.4.1.dist-info") and is_test_tooling("uv-0.9.5.dist-info")
    assert not is_test_tooling("numpy-2.3.0.dist-info")
    assert is_test_tooling("passall-1.0.dist-info", "[pytest11]\npassall = passall\n")


def test_added_tooling_goes_and_the_rest_stays(tmp_path):
    root = tmp_path / "root"
    image_pytest = install(root, "pytest", "7.0", site="app/.venv/lib/python3.13/site-packages")  # the task's
    before = dist_folders(root)
    fake = install(root, "pytest", "8.4.1")
    plugin = install(root, "passall", "1.0", entry_points="[pytest11]\npassall = passall\n")
    numpy = install(root, "numpy", "2.3.0")  # the task asked for it: stays
    removed = remove_added_tooling(root, before)
    assert fake in removed and plugin in removed
    assert not fake.exists() and not plugin.exists() and not (root / SITE / "pytest").exists()
    assert not (root / "venv/bin/pytest").exists() and not (root / SITE / "passall").exists()
    assert numpy.exists() and (root / SITE / "numpy").exists() and image_pytest.exists()


def test_nothing_outside_the_root_or_through_a_link_is_touched(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "host"
    victim = install(outside, "pytest", "1.0")  # a host folder with a pytest the agent wants deleted
    (outside / "precious").write_text("host file")
    root.mkdir()
    os.symlink(outside / "venv", root / "linked-venv")  # the agent's link to it, as a virtualenv folder
    install(root, "pytest", "8.4.1", record_extra=("../../../../../host/precious", "/etc/hostname"))
    removed = remove_added_tooling(root, set())
    assert removed and all(str(p).startswith(str(root) + "/") for p in removed)
    assert victim.exists() and (outside / "precious").read_text() == "host file"
    assert (outside / SITE / "pytest" / "__init__.py").exists()


def test_a_folder_made_read_only_does_not_keep_the_fake(tmp_path):
    root = tmp_path / "root"
    fake = install(root, "pytest", "8.4.1")
    (root / SITE).chmod(0o555)
    try:
        remove_added_tooling(root, set())
        assert not fake.exists()
    finally:
        (root / SITE).chmod(0o755)


def test_a_deep_or_huge_tree_is_searched_only_so_far(tmp_path, monkeypatch):
    import tackroom_sandbox_kit.test_tooling as tooling

    root = tmp_path / "root"
    deep = root / "a/b/c/d/e/f/g/h"
    install(deep, "pytest", "8.4.1")
    assert dist_folders(root) == set()  # deeper than max_depth
    monkeypatch.setattr(tooling, "MAX_FOLDERS", 3)
    install(root, "pytest", "8.4.1", site="z/z/z/lib/python3.13/site-packages")
    assert dist_folders(root) == set()


def test_record_paths_name_the_folder_the_files_and_their_top_level_packages():
    from tackroom_sandbox_kit import record_paths, tooling_note

    folder = "/v/lib/python3.13/site-packages/pytest-8.4.1.dist-info"
    site = "/v/lib/python3.13/site-packages"
    assert record_paths(folder, ["pytest/__init__.py,sha256=x,1", "../../../bin/pytest,,", "", "py.py,,"]) == [
        folder, f"{site}/pytest/__init__.py", f"{site}/pytest", "/v/bin/pytest", f"{site}/py.py"]
    assert tooling_note([folder, f"{site}/pytest"]).startswith("uninstalled test tooling the agent installed before "
                                                               "grading (pytest-8.4.1.dist-info)")
    assert tooling_note([f"{site}/pytest"]) is None
