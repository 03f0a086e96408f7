"""The grader's seccomp filter (tackroom_docker.seccomp): on the host, a process that installs it is refused what
Docker's default profile refuses a container and keeps what it allows; in a container, test.sh runs under it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tackroom import SandboxSpec
from tackroom_docker.seccomp import CAP_SYS_ADMIN, grader_filter, x86_64_filter

x86_64 = pytest.mark.skipif(grader_filter(0) is None, reason="the filter has a table for x86_64 only")
DOCKER_DEFAULT_CAPS = 0xA80425FB
"""Docker's default capability set (no CAP_SYS_ADMIN), as /proc/PID/status's CapBnd shows it in a container."""

# Installs the filter given as hex, then tries each syscall; prints {name: errno or 0}.
PROBE = r"""
import ctypes, json, os, sys
from tackroom_docker.grader_entry import PR_SET_NO_NEW_PRIVS, install_filter
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
assert install_filter(libc, bytes.fromhex(sys.argv[1]))
def call(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    return 0 if r >= 0 else ctypes.get_errno()
out = {"keyctl": call(250, 0, 0, 0, 0), "io_uring_setup": call(425, 1, 0),
       "unshare_user": call(272, 0x10000000),
       "getpid": call(39), "x32_getpid": call(0x40000000 | 39)}
pid = os.fork()
if pid == 0:
    os._exit(7)
out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(out))
"""


def probe(program: bytes) -> dict[str, int]:
    r = subprocess.run([sys.executable, "-c", PROBE, program.hex()], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@x86_64
def test_the_filter_refuses_what_dockers_default_profile_refuses_and_keeps_the_rest():
    seen = probe(x86_64_filter(DOCKER_DEFAULT_CAPS))
    assert seen["keyctl"] == 1 and seen["io_uring_setup"] == 1  # EPERM, whatever the capabilities
    assert seen["unshare_user"] == 1  # no namespaces without CAP_SYS_ADMIN (unfiltered, this machine allows it)
    assert seen["x32_getpid"] == 38  # another ABI: ENOSYS
    assert seen["getpid"] == 0 and seen["fork"] == 7  # plain clone (fork) and everything else still work


@x86_64
def test_with_cap_sys_admin_in_the_bounding_set_namespaces_are_left_to_the_kernel():
    seen = probe(x86_64_filter(DOCKER_DEFAULT_CAPS | 1 << CAP_SYS_ADMIN))
    assert seen["unshare_user"] != 1  # the kernel's answer (0 where user namespaces are allowed), not the filter's
    assert seen["keyctl"] == 1  # refused whatever the capabilities


def test_no_table_no_filter():
    assert grader_filter(0, machine="aarch64") is None
    assert grader_filter(0, machine="x86_64") == x86_64_filter(0)


@x86_64
@pytest.mark.docker
async def test_test_sh_runs_under_the_filter_in_a_container(provider, tmp_path):
    sb = provider.create(SandboxSpec(name=f"seccomp-{uuid.uuid4().hex[:8]}"))
    await sb.start()
    try:
        await sb.fresh_folder("/tests")
        await sb.fresh_folder("/logs/verifier")
        await sb.write_file("/tests/test.sh", "grep Seccomp: /proc/self/status > /logs/verifier/seen\n"
                            "perl -e 'print syscall(250, 0, 0, 0, 0) == -1 ? \"$!\" : \"allowed\"' >> /logs/verifier/seen\n")
        result = await sb.run_grader(["bash", "/tests/test.sh"], private=["/tests", "/logs/verifier"],
                                     collect="/logs/verifier", dest=tmp_path / "out", cwd=None, env=None, timeout=60)
        assert result.exit_code == 0, result.stderr
        seen = (tmp_path / "out" / "seen").read_text()
        assert "Seccomp:\t2" in seen and "Operation not permitted" in seen, seen
    finally:
        await sb.stop()
