"""``SandboxSpec.mounts`` on the local sandbox: host folders bound read-only in folders of bwrap's own root, which the
kit's ``readonly_mounts`` check attacks (and which it fails on a sandbox that binds them writable)."""

from __future__ import annotations

import pytest

import tackroom
from tackroom import SandboxPathError, SandboxSpec
from tackroom.sandbox_features import ReadOnlyMounts
from tackroom.testing import SANDBOX_CHECKS, run_sandbox_checks
from tackroom_local import LocalSandbox, LocalSandboxProvider
from tackroom_local import view as local_view


def only(name: str) -> set[str]:
    return set(SANDBOX_CHECKS) - {name}


def provider_of(cls: type[LocalSandbox], **options) -> LocalSandboxProvider:
    class Provider(LocalSandboxProvider):
        def create(self, spec: tackroom.SandboxSpec) -> LocalSandbox:
            return cls(spec, self.options)

    return Provider(options)


class WritableMounts(LocalSandbox):
    """Deliberately broken: the spec's mounts are bound read-write, their files open to every uid."""

    def _prepare(self) -> None:
        super()._prepare()
        for host in self.spec.mounts.values():
            for path in (host, *host.rglob("*")):
                if not path.is_symlink():
                    path.chmod(0o777)
        mnt = self.namespaces.view.children.get("mnt", local_view.Dir())
        for name, child in mnt.children.items():
            mnt.children[name] = local_view._Bind(child.host, writable=True)


async def test_the_local_sandbox_binds_mounts_read_only(tmp_path):
    assert isinstance(LocalSandboxProvider().create(SandboxSpec(name="m")), ReadOnlyMounts)
    report = await run_sandbox_checks(LocalSandboxProvider({"root_dir": str(tmp_path)}), skip=only("readonly_mounts"))
    (result,) = [r for r in report.results if r.name == "readonly_mounts"]
    assert result.passed and not result.skipped, result.message


async def test_the_mount_check_fails_on_a_sandbox_that_binds_them_writable(tmp_path):
    report = await run_sandbox_checks(provider_of(WritableMounts, root_dir=str(tmp_path)), skip=only("readonly_mounts"))
    failed = {r.name: r.message for r in report.failures}
    assert set(failed) == {"readonly_mounts"}, failed
    assert "changed the mounted host folder" in failed["readonly_mounts"] or "replaced" in failed["readonly_mounts"]


@pytest.mark.parametrize("path", ["/opt/world", "/usr/local/world", "/tmp", "/etc/passwd"])
async def test_a_mount_where_the_sandbox_has_something_is_refused_by_name(tmp_path, path):
    box = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(
        SandboxSpec(name="m", mounts={path: tmp_path}))
    with pytest.raises(SandboxPathError, match="mount"):
        await box.start()
    await box.stop()


async def test_mounts_survive_the_restart_that_ends_the_agents_turn(tmp_path):
    host = tmp_path / "shared"
    (host / "pkg").mkdir(parents=True)
    (host / "pkg" / "mod.py").write_text("VALUE = 7\n")
    for p in (tmp_path, host, host / "pkg"):
        p.chmod(0o755)
    box = LocalSandboxProvider({"root_dir": str(tmp_path / "roots")}).create(
        SandboxSpec(name="m", mounts={"/mnt/shared/v1": host}))
    await box.start()
    try:
        read = "python3 -c 'import mod; print(mod.VALUE)'"
        assert (await box.exec(read, env={"PYTHONPATH": "/mnt/shared/v1/pkg"})).stdout == "7\n"
        await box.kill_processes()
        assert (await box.exec(read, env={"PYTHONPATH": "/mnt/shared/v1/pkg"})).stdout == "7\n"
        dest = tmp_path / "copy"
        await box.download("/mnt/shared/v1", dest)  # transfers read it through the view
        assert (dest / "pkg" / "mod.py").read_text() == "VALUE = 7\n"
    finally:
        await box.stop()
    assert sorted(p.name for p in host.rglob("*")) == ["mod.py", "pkg"]  # no __pycache__ written into it
