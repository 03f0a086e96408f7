"""The host side of transfers: ``write_file_safely`` (what every download writes through) replaces what sits at
the destination instead of writing through it. The tar extraction itself is attacked in the docker plugin's
tests (plugins/sandboxes/docker/tests/test_attacks.py), with real containers planting the links."""

from __future__ import annotations

import io

import pytest

from tackroom_sandbox_kit import write_file_safely


def test_write_file_safely_replaces_a_link_and_refuses_a_directory(tmp_path):
    canary = tmp_path / "canary" / "host-secret.txt"
    canary.parent.mkdir()
    canary.write_text("host original\n")
    dest = tmp_path / "out.txt"
    dest.symlink_to(canary)
    write_file_safely(dest, io.BytesIO(b"new"))
    assert not dest.is_symlink() and dest.read_bytes() == b"new"
    assert canary.read_text() == "host original\n", "the file the link pointed at was written"
    assert sorted(p.name for p in canary.parent.iterdir()) == ["host-secret.txt"]
    with pytest.raises(IsADirectoryError):
        write_file_safely(tmp_path, io.BytesIO(b"x"))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tackroom-")] == [], "a temporary file was left"


def test_write_file_safely_replaces_a_fifo_without_blocking_on_it(tmp_path):
    import os

    dest = tmp_path / "pipe"
    os.mkfifo(dest)
    write_file_safely(dest, io.BytesIO(b"data"), mode=0o600)
    assert dest.is_file() and dest.read_bytes() == b"data" and (dest.stat().st_mode & 0o777) == 0o600
