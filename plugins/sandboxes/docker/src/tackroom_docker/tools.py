"""Before grading: the image's executables and libraries come back, whatever the agent did to them.

``docker container diff`` lists every path added (A), changed (C) or deleted (D) in the container's writable
layer since it was created. Under the tool roots (:func:`tool_roots`: /usr, /bin, /sbin, /lib*, the dynamic
loader's files in /etc, /etc/alternatives, and every directory on the image's ``PATH``):

- a file the agent changed or deleted is copied back from the image (``docker cp`` out of a container created,
  never started, from the same image, and into the trial's container);
- a file the agent added is removed when it shadows one of the image's: an executable earlier on ``PATH``
  than the image's of the same name, a shared library of the same name as one in the image's library
  folders, a Python start-up hook (``sitecustomize.py``, ``usercustomize.py``, ``*.pth``), or
  ``/etc/ld.so.preload``. Other added files (a tool the agent installed) stay: tests may need them.

Paths under the task's ``grading_paths`` (or the working directory) are left as the agent made them: that
is where a task that asks the agent to install or change software is graded.
"""

from __future__ import annotations

import asyncio
import posixpath
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from tackroom import SandboxError

if TYPE_CHECKING:
    from tackroom_docker.sandbox import DockerSandbox

FIXED_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.preload",
               "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.cache", "/etc/alternatives")
LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")

# Args: the added paths to judge. Prints each one it removed. Runs as root from /, with the container's PATH.
REMOVE_SHADOWS = r"""
added=" $* "
for p in "$@"; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    [ -d "$p" ] && [ ! -L "$p" ] && continue
    d=${p%/*}; n=${p##*/}; bad=
    case $p in
        /etc/ld.so.preload|*/sitecustomize.py|*/usercustomize.py|*.pth) bad=1 ;;
    esac
    if [ -z "$bad" ]; then
        later=; oldifs=$IFS; IFS=:
        for q in $PATH; do
            if [ "$q" = "$d" ]; then later=1; continue; fi
            if [ -n "$later" ] && { [ -e "$q/$n" ] || [ -L "$q/$n" ]; }; then
                case $added in *" $q/$n "*) ;; *) bad=1; break ;; esac
            fi
        done
        IFS=$oldifs
    fi
    if [ -z "$bad" ]; then
        case $n in *.so|*.so.*)
            for q in %LIBS%; do
                [ "$q" = "$d" ] && continue
                if [ -e "$q/$n" ]; then case $added in *" $q/$n "*) ;; *) bad=1; break ;; esac; fi
            done ;;
        esac
    fi
    if [ -n "$bad" ]; then rm -f "$p" && echo "$p"; fi
done
exit 0
""".replace("%LIBS%", " ".join(LIB_DIRS))

# Args: changed paths. Prints those that are regular files, links or other non-directories now.
NOT_DIRS = r"""
for p in "$@"; do if [ -L "$p" ] || [ ! -d "$p" ]; then echo "$p"; fi; done
"""


def tool_roots(path_env: str, keep: list[str]) -> list[str]:
    """:data:`FIXED_ROOTS` plus each ``PATH`` folder (its parent for ``…/bin``, so a virtualenv's libraries count),
    leaving out folders under ``keep`` (the working directory, ``grading_paths``) and /tmp."""
    roots = list(FIXED_ROOTS)
    for d in path_env.split(":"):
        if not d.startswith("/") or ".." in d.split("/"):
            continue
        d = posixpath.normpath(d)
        base = posixpath.dirname(d) if posixpath.basename(d) in ("bin", "sbin") else d
        if base in ("/", "") or under(base, ["/tmp", "/var/tmp", "/dev/shm", *keep]) or under(d, keep):
            continue
        roots.append(base)
    return list(dict.fromkeys(roots))


def under(path: str, roots: list[str] | tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots if r)


async def restore_image_tools(sandbox: DockerSandbox, keep: list[str]) -> list[str]:
    """See the module docstring; returns the paths restored or removed."""
    cli, timeout = sandbox.cli, sandbox.options.cli_timeout_sec
    diff = await cli.run(["container", "diff", sandbox.name], timeout=timeout)
    if not diff.ok:
        await sandbox._raise_if_gone_or(diff, "docker container diff failed before grading")
    image = sandbox.image
    env = (image.record.get("Config") or {}).get("Env") or [] if image is not None else []
    path_env = next((e[5:] for e in env if e.startswith("PATH=")), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    roots = tool_roots(path_env, keep)
    changed: list[str] = []
    deleted: list[str] = []
    added: list[str] = []
    for line in diff.out.splitlines():
        kind, _, path = line.partition(" ")
        if not under(path, roots) or under(path, keep):
            continue
        {"C": changed, "D": deleted, "A": added}.get(kind, []).append(path)
    if not (changed or deleted or added):
        return []
    done: list[str] = []
    if changed:
        files = await sandbox._root_exec(NOT_DIRS, *changed, timeout=timeout)
        changed = [p for p in files.out.splitlines() if p]
    deleted = [p for p in deleted if not under(posixpath.dirname(p), deleted)]  # a deleted folder comes back whole
    to_copy = changed + deleted
    if to_copy and image is not None:
        done += await copy_from_image(sandbox, image.ref, to_copy)
    if added:
        removed = await sandbox._root_exec(REMOVE_SHADOWS, *added, timeout=timeout)
        done += [p for p in removed.out.splitlines() if p]
    return done


async def copy_from_image(sandbox: DockerSandbox, ref: str, paths: list[str]) -> list[str]:
    """Copy each of ``paths`` from image ``ref`` into the sandbox's container, at the same place; returns those the
    image has."""
    cli, timeout = sandbox.cli, sandbox.options.cli_timeout_sec
    pristine = f"{sandbox.name}-pristine"
    made = await cli.run(["create", "--name", pristine, "--label", "tackroom.managed=1", "--network", "none",
                          "--entrypoint", "true", ref], timeout=timeout)
    if not made.ok:
        raise SandboxError(f"could not create a container from {ref} to restore the image's tools: {made.describe()}")
    gate = asyncio.Semaphore(8)

    async def copy(path: str) -> str | None:
        async with gate:
            with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
                archive = Path(tmp) / "tool.tar"
                out = await cli.run(["cp", f"{pristine}:{path}", "-"], stdout_path=archive, timeout=timeout)
                if not out.ok:  # not in the image
                    return None
                put = await cli.run(["cp", "-", f"{sandbox.name}:{posixpath.dirname(path) or '/'}"], stdin=archive,
                                    timeout=timeout)
            if not put.ok:
                raise SandboxError(f"could not restore {path} from {ref} into {sandbox.name}: {put.describe()}")
            return path

    try:
        results = await asyncio.gather(*(copy(p) for p in paths))
    finally:
        await cli.run(["rm", "-f", pristine], timeout=timeout)
    return [p for p in results if p]
