"""``run_grader``: the grader's command in a private view of the container that kept services cannot steer.

The host's Python runs :mod:`tackroom_docker.grader_entry` as root; it joins the container's namespaces
(network: the container's, the host's for public grading, or a fresh loopback-only one), unshares a mount
namespace of its own and mounts tmpfs copies of the ``private`` folders there. Kept services (frozen since
:meth:`~tackroom_docker.sandbox.DockerSandbox.kill_processes`) resume only for the command's run and never see
the copies; the command runs in the container's cgroups with the container's capability bounding set and
``no_new_privs``, a clean environment and a fresh HOME. The reward folder comes back as a tar of the private
copy, written to a host file that nothing in the container can reach.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path

from tackroom import ExecResult, GradingSabotagedError, SandboxError, SandboxTimeoutError
from tackroom.grading import GRADER_CLEAN_ENV, GRADER_SCRUBBED_ENV
from tackroom_docker.container import Container
from tackroom_docker.engine import run_host
from tackroom_docker.seccomp import grader_filter
from tackroom_docker.tools import run_in_image, tool_roots
from tackroom_docker.toolset import BIN, STAGE
from tackroom_sandbox_kit import PIP_CONFIG_FILES, UV_CONFIG_FILES, extract_tar, install_env

ENTRY = Path(__file__).with_name("grader_entry.py")


# Args: the network ("container" | "host" | "isolated"), the tmpfs size in MB, how many graded paths, those, then
# the private folders. Runs with full capabilities in the grader's own mount namespace, before anything of the agent
# runs again.
SETUP = r"""
net=$1; size=$2; m=$3; shift 3
mount -t tmpfs -o "size=${size}m,mode=0755" tackroom-grader %STAGE% || exit 10
mkdir -m 0700 %STAGE%/home || exit 10
# HOME starts as the image's skeleton (restored before grading): a login shell a test starts reads its .profile
if [ -d /etc/skel ] && [ ! -L /etc/skel ]; then cp -a /etc/skel/. %STAGE%/home/ 2>/dev/null; fi
# what the grader reads while kept services run: a copy taken while they are frozen, bound over the real folder
# or file (resolved as the container sees it), so what they write there meanwhile is never graded
j=0
while [ "$j" -lt "$m" ]; do
    p=$1; shift; j=$((j + 1))
    r=$(readlink -f "$p") || continue
    case $r in /|%STAGE%|%STAGE%/*) continue ;; esac
    if [ -d "$r" ]; then
        mkdir "%STAGE%/s$j" && cp -a "$r/." "%STAGE%/s$j/" || { echo "tackroom: $p does not fit in the grader's copy (${size} MB)" >&2; exit 3; }
    elif [ -f "$r" ]; then
        cp -a "$r" "%STAGE%/s$j" || { echo "tackroom: $p does not fit in the grader's copy (${size} MB)" >&2; exit 3; }
    else
        continue
    fi
    mount --bind "%STAGE%/s$j" "$r" || exit 12
done
i=0
for p in "$@"; do
    cur=; rest=${p#/}
    while [ -n "$rest" ]; do
        case $rest in */*) c=${rest%%/*}; rest=${rest#*/} ;; *) c=$rest; rest= ;; esac
        cur=$cur/$c
        if [ -L "$cur" ]; then echo "tackroom: $cur is a link" >&2; exit 3; fi
    done
    if [ ! -d "$p" ]; then echo "tackroom: $p is not a folder" >&2; exit 3; fi
    i=$((i + 1))
    mkdir "%STAGE%/$i" && cp -a "$p/." "%STAGE%/$i/" || exit 11
    mount --bind "%STAGE%/$i" "$p" || exit 12
done
exit 0
""".replace("%STAGE%", STAGE)


# Args: the guarded folders' patterns. After a grader command that was killed before it could take its read-only
# bind mounts off again (see grader_entry): each one comes off here, in the container's mount namespace.
UNGUARD = r"""
for pat; do
    for p in $pat; do
        while awk -v p="$p" '$5 == p { f = 1 } END { exit !f }' /proc/self/mountinfo; do umount -l "$p" || break; done
    done
done
if [ -f /etc/ld.so.preload ] && [ ! -s /etc/ld.so.preload ]; then rm -f /etc/ld.so.preload; fi
exit 0
"""


def clean_env(image_env: list[str], spec_env: dict[str, str], extra: dict[str, str] | None) -> dict[str, str]:
    """What ``docker exec`` would give the command, less every start-up variable, plus a fresh HOME; ``extra`` wins."""
    env: dict[str, str] = {}
    for item in image_env:
        key, _, value = item.partition("=")
        env[key] = value
    env.update(spec_env)
    for key in GRADER_SCRUBBED_ENV:
        env.pop(key, None)
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.update({"HOME": f"{STAGE}/home", **GRADER_CLEAN_ENV})
    env.update(extra or {})
    return env


# Prints the image's own package-manager configuration: each pip system file as "== path" then its text, and the
# uv system file uv would read ("UV path"). Run in a container of the untouched image (tools.run_in_image).
IMAGE_INSTALL_CONFIG = r"""
for f in %PIP%; do [ -f "$f" ] && printf '== %s\n' "$f" && cat "$f" && echo; done
for f in %UV%; do [ -f "$f" ] && echo "UV $f" && break; done
exit 0
""".replace("%PIP%", " ".join(PIP_CONFIG_FILES)).replace("%UV%", " ".join(reversed(UV_CONFIG_FILES)))
_install_configs: dict[str, tuple[list[str], str | None]] = {}


async def image_install_config(container: Container) -> tuple[list[str], str | None]:
    """The image's own pip files (their text, lowest priority first) and uv system file (its path), read from the
    untouched image once per image: what the agent wrote in the container is never read."""
    image = container.image
    if image is None:
        return [], None
    key = str(image.record.get("Id") or image.ref)
    if key not in _install_configs:
        out = await run_in_image(container, image.ref, IMAGE_INSTALL_CONFIG, stdin=b"")
        if not out.ok:
            raise SandboxError(f"could not read the package-manager configuration of {image.ref}: {out.describe()}")
        texts: list[str] = []
        uv: str | None = None
        for line in out.out.splitlines(keepends=True):
            if line.startswith("== /"):
                texts.append("")
            elif line.startswith("UV /"):
                uv = line[3:].strip()
            elif texts:
                texts[-1] += line
        _install_configs[key] = (texts, uv)
    return _install_configs[key]


def image_env(container: Container) -> list[str]:
    return (container.image.record.get("Config") or {}).get("Env") or [] if container.image is not None else []


def entry_settings(container: Container, cmd: list[str], status: Path, *, cwd: str, env: dict[str, str]) -> dict:
    """:mod:`tackroom_docker.grader_entry`'s settings for a plain command: no private folders, no guards."""
    pid = container.pid
    capabilities = capability_bounding_set(pid)
    program = grader_filter(int(capabilities, 16))
    return {
        "pid": pid, "net": container.grading_net, "bin": BIN, "status": str(status), "collect_tar": "", "collect": "",
        "cgroup_procs": cgroup_procs(pid), "cap_bounding": capabilities, "seccomp": program.hex() if program else "",
        "cap_last": Path("/proc/sys/kernel/cap_last_cap").read_text().strip(),
        "setup_script": "", "setup_args": [], "kept": [], "readonly": [], "readonly_files": [],
        "cwd": cwd, "env": env, "cmd": list(cmd),
    }


async def exec_in_namespaces(container: Container, cmd: list[str], *, cwd: str, env: dict[str, str], timeout: float,
                             stdin: bytes | None) -> ExecResult:
    """A command in the container's namespaces but the grading network (after ``set_network``), as the container's
    root with its capabilities and cgroups: what ``docker exec`` would run, on the host's network."""
    with tempfile.TemporaryDirectory(prefix="tackroom-exec-") as tmp:
        status_path = Path(tmp) / "status.json"
        full_env = {k: v for k, v in (item.partition("=")[::2] for item in image_env(container))}
        full_env.update({**container.spec.env, **env})
        cfg = entry_settings(container, cmd, status_path, cwd=cwd, env=full_env)
        argv = [sys.executable, "-I", "-S", str(ENTRY), json.dumps(cfg)]
        result = await run_host(argv, timeout=timeout, stdin=stdin, output_limit=container.options.output_limit_bytes,
                                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
        try:
            status = json.loads(status_path.read_text() or "{}")
        except (OSError, ValueError):
            status = {}
    if status.get("step") != "done":
        await container.raise_if_gone(None)
        raise SandboxError(f"could not run a command in {container.name} on the grading network ({status or 'no status'}): "
                           f"{result.err[-1000:]}")
    return ExecResult(exit_code=int(status["exit"]), stdout=result.out, stderr=result.err, truncated=result.truncated,
                      duration_s=result.duration_s)


def guarded_roots(container: Container) -> list[str]:
    """The folders kept services find read-only while the grader's command runs: the image's tool roots (as
    restore sees them, less the working directory and ``grading_paths``), the interpreters' config folders and the
    package managers' (apt's, uv's: the grader's installs read them while services run)."""
    path_env = next((e[5:] for e in image_env(container) if e.startswith("PATH=")), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    roots = [r for r in tool_roots(path_env, [container.workdir, *container.keep]) if not r.startswith("/etc/ld.so")]
    return [*sorted(roots), "/etc/perl", "/etc/python*", "/etc/apt", "/etc/uv", "/etc/xdg"]


def snapshot_args(container: Container, graded: list[str] | tuple[str, ...]) -> list[str]:
    """SETUP's graded paths (how many, then each): none when no service is kept (nothing else runs beside the grader)."""
    paths = [p for p in (container.resolve(g) for g in graded) if p != "/"] if container.kept else []
    return [str(len(paths)), *paths]


def cgroup_procs(pid: int) -> list[str]:
    """The ``cgroup.procs`` files of every cgroup process ``pid`` is in (v1 and v2), as the host sees them."""
    found: list[str] = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers.startswith("name="):
            continue
        base = Path("/sys/fs/cgroup") if controllers == "" else Path("/sys/fs/cgroup") / controllers.split(",")[0]
        if controllers and not base.exists():
            base = Path("/sys/fs/cgroup") / controllers
        procs = base / path.lstrip("/") / "cgroup.procs"
        if procs.exists() and str(procs) not in found:
            found.append(str(procs))
    return found


def pids_exhausted(pid: int) -> bool:
    """Whether the container of process ``pid`` holds every pid its limit allows (``pids.current`` >= ``pids.max``)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers and "pids" not in controllers.split(","):
            continue
        base = Path("/sys/fs/cgroup") / ("pids" if controllers else "") / path.lstrip("/")
        try:
            limit = (base / "pids.max").read_text().strip()
            return limit != "max" and int((base / "pids.current").read_text()) >= int(limit)
        except (OSError, ValueError):
            continue
    return False


def capability_bounding_set(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            return line.split()[1]
    raise SandboxError(f"could not read the capabilities of container process {pid}")


async def run_grader(
    container: Container,
    cmd: list[str],
    *,
    private: list[str],
    collect: str,
    dest: Path,
    cwd: str | None,
    env: dict[str, str] | None,
    timeout: float,
    graded: list[str] | tuple[str, ...] = (),
    egress_env: dict[str, str] | None = None,
) -> ExecResult:
    """See :meth:`tackroom.Sandbox.run_grader` and the module docstring; ``graded`` is copied only while services
    are kept (:data:`SETUP`); ``egress_env`` is what an allowlist's proxy adds to the environment."""
    container.require_started()
    folders = [container.resolve(p) for p in private]
    collected = container.resolve(collect)
    if collected not in folders:
        raise ValueError(f"collect={collect!r} must be one of private={private!r}")
    with tempfile.TemporaryDirectory(prefix="tackroom-grader-") as tmp:
        status_path, tar_path = Path(tmp) / "status.json", Path(tmp) / "collect.tar"
        grader_env = clean_env(image_env(container), {**container.spec.env, **(egress_env or {})}, None)  # an allowlist's proxy
        pip_configs, uv_config = await image_install_config(container)
        # package managers read the image's configuration only (tackroom_sandbox_kit.install_config); env wins
        grader_env.update({**install_env(grader_env, pip_configs=pip_configs, uv_config=uv_config), **(env or {})})
        cfg = entry_settings(container, cmd, status_path, cwd=container.resolve(cwd) if cwd is not None else container.workdir,
                             env=grader_env)
        cfg.update({
            "collect_tar": str(tar_path),
            "setup_script": SETUP,
            "setup_args": [container.grading_net, str(container.spec.storage_mb or 2048), *snapshot_args(container, graded), *folders],
            "kept": container.kept,
            "readonly": guarded_roots(container),
            "readonly_files": ["/etc/ld.so.preload"],
            "collect": collected,
        })
        argv = [sys.executable, "-I", "-S", str(ENTRY), json.dumps(cfg)]
        try:
            result = await run_host(argv, timeout=timeout, output_limit=container.options.output_limit_bytes,
                                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
        except SandboxTimeoutError:
            await container.freeze_all()
            await container.root_exec(UNGUARD, *cfg["readonly"], "/etc/ld.so.preload", timeout=container.options.cli_timeout_sec)
            raise SandboxTimeoutError(f"the grader's command exceeded its {timeout:g}s timeout and was killed: "
                                      f"{' '.join(cmd)[:120]}") from None
        try:
            status = json.loads(status_path.read_text() or "{}")
        except (OSError, ValueError):
            status = {}
        if status.get("step") != "done":
            await container.raise_if_gone(None)
            await container.freeze_all()
            await container.root_exec(UNGUARD, *cfg["readonly"], "/etc/ld.so.preload", timeout=container.options.cli_timeout_sec)
            stderr = result.err[-1500:]
            if status.get("step") == "setup" and status.get("exit") == 3:
                raise GradingSabotagedError(f"the agent left a folder the grader needs unusable ({stderr.strip()}); graded 0")
            raise SandboxError(f"could not set up the grader's private view in {container.name} "
                               f"({status or 'no status'}): {stderr or result.out[-500:]}")
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        if tar_path.stat().st_size:
            with tarfile.open(tar_path) as tar:
                extract_tar(tar, dest)
        return ExecResult(exit_code=int(status["exit"]), stdout=result.out, stderr=result.err,
                          truncated=result.truncated, duration_s=result.duration_s)
