"""Before grading: the image's executables, libraries and interpreter modules come back, whatever the agent did.

``docker container diff`` (read whole, into a file) lists every path added (A), changed (C) or deleted (D) in the
container's writable layer since it was created. Paths are compared as the layer stores them, real paths: on a
merged-/usr image (``/bin -> usr/bin``) ``/usr/bin/x`` and ``/bin/x`` are one file.

- Under the tool roots (:func:`tool_roots`: /usr, /bin, /sbin, /lib*, the dynamic loader's files in /etc,
  /etc/alternatives, the shells' start-up files in /etc, every folder on the image's ``PATH``) a file the agent
  changed or deleted comes back from the image.
- Anywhere else, a changed or deleted file comes back when the image's version is a grader tool: an executable,
  a shared library or an interpreter module (:data:`TOOL_NAMES`). Config and data the agent was asked to change
  stay as the agent left them.
- A file the agent added is removed when it shadows one of the image's: an executable earlier on ``PATH`` than
  the image's of the same name (a different file, by real path), a shared library of the same name as one in
  the image's library folders; or when it is a start-up hook an interpreter loads (:data:`HOOKS`: Python's
  ``sitecustomize``/``usercustomize``, ``*.pth``, a ``pythonNN.zip`` on ``sys.path``, Perl's
  ``sitecustomize.pl`` or a module in /etc/perl, ``/etc/ld.so.preload``, a shell start-up file in
  /etc/profile.d or the /etc/skel the grader's HOME is made from), wherever it lies. Other added files (a
  tool the agent installed) stay: tests may need them.
- The configuration the grader's installs and test runner discover (:data:`INSTALL_CONFIGS`: pip's, uv's, apt's,
  npm's system files, pytest's at ``/``) is the image's: added files are removed, changed or deleted ones come back.

- Test tooling the agent installed (``tackroom_sandbox_kit.TEST_TOOLING``: pytest, its plugins, pluggy, uv, ...) is uninstalled,
  wherever it lies, the working directory's virtualenvs included: otherwise a fake ``pytest==8.4.1`` satisfies
  ``test.sh``'s own ``pip install pytest==8.4.1`` ("Requirement already satisfied"), and a plugin of the agent's
  is loaded by every pytest run. Only what the agent added goes (its files in the container diff); test.sh
  installs its own, and what the image shipped is restored as above.

The image's files are read from a container of the image that the agent never touched, with the sandbox's
toolset (:mod:`tackroom_docker.toolset`), and put back with one ``docker cp``. Paths under the task's
``grading_paths`` (or the working directory) are left as the agent made them.
"""

from __future__ import annotations

import asyncio
import fnmatch
import posixpath
import tarfile
import tempfile
from pathlib import Path

from tackroom import SandboxError
from tackroom_docker.container import Container
from tackroom_docker.engine import CallResult
from tackroom_docker.toolset import BIN, MOUNT, find_busybox, mount_args, toolset_dir
from tackroom_sandbox_kit import is_test_tooling, record_paths, tooling_note

FIXED_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.preload",
               "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.cache", "/etc/alternatives",
               "/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/etc/skel", "/etc/environment")
LIB_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu")
NEVER_RESTORED = ("/proc", "/sys", "/dev", "/tmp", "/var/tmp", "/run", "/var/run", "/var/log", "/var/cache",
                  "/var/lib/apt", "/var/lib/dpkg", MOUNT)
"""Runtime state, never grader tools (dpkg's database changes with every install the agent was asked to make)."""
TOOL_NAMES = ("*.so", "*.so.*", "*.py", "*.pyc", "*.pm", "*.pl", "*.rb", "*.js", "*.mjs", "*.cjs", "*.lua", "*.jar")
"""Names of grader tools that are not executable files: shared libraries and interpreter modules."""
HOOKS = ("/etc/ld.so.preload", "*/sitecustomize.py", "*/usercustomize.py", "*/sitecustomize.pl", "*.pth",
         "*/python[0-9]*.zip", "/etc/perl/*.pm", "/etc/perl/*/*.pm", "/etc/profile.d/*", "/etc/skel/*")
"""Files an interpreter or the loader runs at start when they exist: removed wherever the agent added them."""
INSTALL_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/*", "/etc/uv/*", "/etc/xdg/uv/*", "/etc/apt/*", "/etc/npmrc",
                   "*/etc/npmrc", "*/node_modules/npm/npmrc", "/pytest.ini", "/.pytest.ini", "/pyproject.toml",
                   "/tox.ini", "/setup.cfg", "/setup.py", "/conftest.py", "/var/lib/apt/lists/*",
                   "/var/cache/apt/archives/*.deb", "/.cargo/*", "*/cargo/config", "*/cargo/config.toml",
                   "*/.cargo/config", "*/.cargo/config.toml", "/etc/conda/*", "*/.condarc", "*/condarc.d/*",
                   "/etc/gemrc")
"""Configuration the grader's package managers and test runner discover on their own (docs/threat-model.md,
"The grader's installs"): pip's and uv's system files, apt's sources and settings, its package lists and
downloaded packages (apt trusts a list already on disk and a cached ``.deb`` whose hash a list names, without
checking a signature again), npm's global and built-in npmrc, cargo's (``$CARGO_HOME`` and ``/.cargo``, above the
working directory), conda's and gem's system files, and pytest's ini files and conftest.py at ``/`` (the only
folder above ``/tests``). As the image made them: what the agent added is removed, what it changed or deleted
comes back from the image (an ``apt-get update`` in test.sh fetches signed lists afresh where it has a network)."""
DIST_INFO = ("*/site-packages/*.dist-info", "*/dist-packages/*.dist-info", "*/site-packages/*.egg-info",
             "*/dist-packages/*.egg-info")
MODULE_SUFFIXES = (".pm", ".py", ".pyc", ".so")
"""Added files judged against the image's perl @INC and python sys.path (:data:`INTERPRETER_SHADOWS`)."""

# Args: the image's PATH. Stdin: added paths, one a line. Prints each one it removed. Runs with the toolset.
REMOVE_SHADOWS = r"""
image_path=$1
dirs=; oldifs=$IFS; IFS=:
for q in $image_path; do IFS=$oldifs; r=$(realpath "$q" 2>/dev/null) && dirs="$dirs $r"; IFS=:; done
IFS=$oldifs
libs=
for q in %LIBS%; do r=$(realpath "$q" 2>/dev/null) && libs="$libs $r"; done
added=" "
while IFS= read -r p; do added="$added$p "; done
for p in $added; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    [ -d "$p" ] && [ ! -L "$p" ] && continue
    d=${p%/*}; n=${p##*/}; bad=
    case $p in %HOOKS%) bad=1 ;; esac
    rd=$(realpath "${d:-/}" 2>/dev/null) || rd=$d
    if [ -z "$bad" ]; then
        later=
        for q in $dirs; do
            if [ "$q" = "$rd" ]; then later=1; continue; fi
            [ -n "$later" ] || continue
            if { [ -e "$q/$n" ] || [ -L "$q/$n" ]; } && ! [ "$q/$n" -ef "$p" ]; then
                case $added in *" $q/$n "*) ;; *) bad=1; break ;; esac
            fi
        done
    fi
    if [ -z "$bad" ]; then
        case $n in *.so|*.so.*)
            for q in $libs; do
                [ "$q" = "$rd" ] && continue
                if [ -e "$q/$n" ] && ! [ "$q/$n" -ef "$p" ]; then
                    case $added in *" $q/$n "*) ;; *) bad=1; break ;; esac
                fi
            done ;;
        esac
    fi
    if [ -n "$bad" ]; then rm -f "$p" && echo "$p"; fi
done
exit 0
""".replace("%LIBS%", " ".join(LIB_DIRS)).replace("%HOOKS%", "|".join((*HOOKS, *INSTALL_CONFIGS)))

# Stdin: paths, one a line. Removes each (a link, not its target) and prints it.
REMOVE_LISTED = r"""
while IFS= read -r p; do [ -n "$p" ] && rm -f "$p" && echo "$p"; done; exit 0
"""

# Stdin: changed paths, one a line. Prints those that are regular files, links or other non-directories now.
NOT_DIRS = r"""
while IFS= read -r p; do if [ -L "$p" ] || [ ! -d "$p" ]; then echo "$p"; fi; done
"""

# In a container of the untouched image, with the image's PATH in $1. Stdin: added module files, one a line.
# Prints each that comes earlier on the image's perl @INC or python sys.path than a module of the same name the
# image has (a file, or for python a package folder or extension), so that it would load instead.
INTERPRETER_SHADOWS = r"""
export PATH="$PATH:$1"
nl='
'
inc=; for d in $(perl -e 'print join("\n", @INC)' 2>/dev/null); do r=$(realpath "$d" 2>/dev/null) || r=$d; inc="$inc$r$nl"; done
pys=; for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 || continue
    for d in $("$py" -c 'import sys; print("\n".join(p for p in sys.path if p))' 2>/dev/null); do
        r=$(realpath "$d" 2>/dev/null) || r=$d; pys="$pys$r$nl"
    done
done
IFS=$nl
while read -r p; do
    found=
    case $p in *.pm) for d in $inc; do
        if [ -z "$found" ]; then case $p in "$d"/*) found=1; rel=${p#"$d"/} ;; esac; continue; fi
        if [ -e "$d/$rel" ]; then echo "$p"; break; fi
    done ;; esac
    found=
    for d in $pys; do
        if [ -z "$found" ]; then
            case $p in "$d"/*) found=1; top=${p#"$d"/}; top=${top%%/*}; top=${top%%.*} ;; esac
            continue
        fi
        if [ -e "$d/$top.py" ] || [ -e "$d/$top.pyc" ] || [ -d "$d/$top" ] || ls "$d/$top".*.so >/dev/null 2>&1; then echo "$p"; break; fi
    done
done
exit 0
"""

# In a container of the untouched image. Stdin: "R path" (restore what the image has there: a file, link or
# folder), "F path" (only if it is a grader tool: an executable regular file or a TOOL_NAMES file) or "T path"
# (as F, and for a folder each grader tool it holds). Writes a tar of them to stdout.
IMAGE_FILES = r"""
set --
tool() { [ -f "$1" ] && [ ! -L "$1" ] && { [ -x "$1" ] || case ${1##*/} in %TOOLS%) true ;; *) false ;; esac; }; }
while IFS= read -r line; do
    k=${line%% *}; p=${line#* }
    [ -e "$p" ] || [ -L "$p" ] || continue
    if [ "$k" = R ]; then set -- "$@" "$p"
    elif [ "$k" = T ] && [ -d "$p" ] && [ ! -L "$p" ]; then
        for f in $(find "$p" -type f 2>/dev/null); do tool "$f" && set -- "$@" "$f"; done
    elif tool "$p"; then set -- "$@" "$p"
    fi
done
[ "$#" -gt 0 ] || exit 0
exec tar -cf - "$@" 2>/dev/null
""".replace("%TOOLS%", "|".join(TOOL_NAMES))


# Stdin: added .dist-info/.egg-info folders, one a line. For each: "== folder", "P" when its entry_points.txt
# registers a pytest plugin, then the paths its RECORD (or installed-files.txt) lists, one a line.
READ_DISTS = r"""
while IFS= read -r d; do
    [ -d "$d" ] && [ ! -L "$d" ] || continue
    echo "== $d"
    if [ -f "$d/entry_points.txt" ] && [ ! -L "$d/entry_points.txt" ] && grep -q '^\[pytest11\]' "$d/entry_points.txt"; then echo P; fi
    for f in "$d/RECORD" "$d/installed-files.txt"; do
        [ -f "$f" ] && [ ! -L "$f" ] && while IFS=, read -r q _; do echo "F $q"; done < "$f"
    done
done
exit 0
"""

# Stdin: paths, one a line. Removes each (a folder with what it holds, a link, not its target) and prints it.
REMOVE_TREES = r"""
while IFS= read -r p; do [ -n "$p" ] && { [ -e "$p" ] || [ -L "$p" ]; } && rm -rf "$p" && echo "$p"; done; exit 0
"""


async def remove_test_tooling(container: Container, added: set[str]) -> list[str]:
    """Uninstall the test tooling the agent added (:func:`tackroom_sandbox_kit.is_test_tooling`): only files the container diff lists as added
    (``added``), the distribution's folder and the files its RECORD names; returns the paths removed."""
    folders = [p for p in added if any(fnmatch.fnmatchcase(p, g) for g in DIST_INFO)]
    if not folders:
        return []
    listed = await container.root_exec(READ_DISTS, timeout=container.options.cli_timeout_sec, stdin=_lines(folders))
    doomed: list[str] = []
    folder, files, plugin = "", [], False
    for line in [*listed.out.splitlines(), "== "]:
        if line.startswith("== "):
            if folder and is_test_tooling(folder, "[pytest11]" if plugin else ""):
                doomed += [p for p in record_paths(folder, files) if p == folder or (p in added and not under(p, [folder]))]
            folder, files, plugin = line[3:], [], False
        elif line == "P":
            plugin = True
        elif line.startswith("F "):
            files.append(line[2:])
    doomed = [p for p in dict.fromkeys(doomed) if not under(posixpath.dirname(p), doomed)]
    if not doomed:
        return []
    removed = await container.root_exec(REMOVE_TREES, timeout=container.options.cli_timeout_sec, stdin=_lines(doomed))
    gone = [p for p in removed.out.splitlines() if p]
    if note := tooling_note(gone):
        container.notes.append(note)
    return gone


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


async def restore_image_tools(container: Container, keep: list[str]) -> list[str]:
    """See the module docstring; returns the paths restored or removed."""
    cli, timeout = container.cli, container.options.cli_timeout_sec
    with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
        listing = Path(tmp) / "diff"
        diff = await cli.run(["container", "diff", container.name], timeout=timeout, stdout_path=listing)
        if not diff.ok:
            await container.raise_if_gone_or(diff, "docker container diff failed before grading")
        lines = listing.read_text(errors="surrogateescape").splitlines()
    image = container.image
    env = (image.record.get("Config") or {}).get("Env") or [] if image is not None else []
    path_env = next((e[5:] for e in env if e.startswith("PATH=")), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    roots = tool_roots(path_env, keep)
    tooling = await remove_test_tooling(container, {line[2:] for line in lines if line.startswith("A ")})
    changed: list[str] = []
    deleted: list[str] = []
    added: list[str] = []
    elsewhere: list[str] = []  # changed ("F") or deleted ("T") outside the tool roots: back when the image's is a tool
    for line in lines:
        kind, _, path = line.partition(" ")
        if under(path, keep) or under(path, tooling):
            continue
        config = any(fnmatch.fnmatchcase(path, c) for c in INSTALL_CONFIGS)  # apt's lists too, though under /var
        if not config and under(path, NEVER_RESTORED):
            continue
        if config or under(path, roots):
            {"C": changed, "D": deleted, "A": added}.get(kind, []).append(path)
        elif kind == "A" and any(fnmatch.fnmatchcase(path, h) for h in HOOKS):
            added.append(path)
        elif kind in ("C", "D"):
            elsewhere.append(f"{'F' if kind == 'C' else 'T'} {path}")
    if not (changed or deleted or added or elsewhere):
        return tooling
    done: list[str] = list(tooling)
    if changed:
        files = await container.root_exec(NOT_DIRS, timeout=timeout, stdin=_lines(changed))
        changed = [p for p in files.out.splitlines() if p]
    deleted = [p for p in deleted if not under(posixpath.dirname(p), deleted)]  # a deleted folder comes back whole
    if image is not None and (changed or deleted or elsewhere):
        wanted = [f"R {p}" for p in changed + deleted] + elsewhere
        put_back = await copy_from_image(container, image.ref, wanted)
        done += put_back
        if put_back and any(p.startswith("/var/lib/dpkg") for p in (line[2:] for line in lines)):
            note = await upgrade_note(container, image.ref, len(put_back))
            if note:
                container.notes.append(note)
    if added:
        removed = await container.root_exec(REMOVE_SHADOWS, path_env, timeout=timeout, stdin=_lines(added))
        done += [p for p in removed.out.splitlines() if p]
    modules = [p for p in added if p not in done and p.endswith(MODULE_SUFFIXES)]
    if modules and image is not None:
        shadows = await run_in_image(container, image.ref, INTERPRETER_SHADOWS, path_env, stdin=_lines(modules))
        if shadows.out.strip():
            removed = await container.root_exec(REMOVE_LISTED, timeout=timeout, stdin=shadows.stdout)
            done += [p for p in removed.out.splitlines() if p]
    return done


DPKG_STATUS = "exec cat /var/lib/dpkg/status 2>/dev/null; exit 0"


def package_versions(status: str) -> dict[str, str]:
    """``Package`` -> ``Version`` of every installed stanza of a dpkg ``status`` file."""
    versions: dict[str, str] = {}
    for stanza in status.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line[0].isspace())
        if "Package" in fields and "Version" in fields and fields.get("Status", "").endswith(" installed"):
            versions[fields["Package"]] = fields["Version"]
    return versions


async def upgrade_note(container: Container, ref: str, count: int) -> str | None:
    """When the agent changed the image's packages (an ``apt-get upgrade``, a ``dpkg -i``): which ones, for the notes,
    since their files were just put back as the image had them. dpkg's database is the agent's to write, so this
    only reports; it never decides what is restored."""
    now = await container.root_exec(DPKG_STATUS, timeout=container.options.cli_timeout_sec)
    before = await run_in_image(container, ref, DPKG_STATUS, stdin=b"")
    old, new = package_versions(before.out), package_versions(now.out)
    moved = [f"{name} {old[name]} -> {new[name]}" for name in sorted(old) if name in new and new[name] != old[name]]
    if not moved:
        return None
    shown = ", ".join(moved[:8]) + (f" and {len(moved) - 8} more" if len(moved) > 8 else "")
    return (f"the agent upgraded packages of the image in place ({shown}); before grading, {count} of the image's "
            "files were put back as the image had them, so the tests ran the image's versions, not the upgrades "
            "(dpkg's database still names the upgrades)")


def _lines(paths: list[str]) -> bytes:
    return "".join(f"{p}\n" for p in paths if "\n" not in p).encode(errors="surrogateescape")


async def run_in_image(container: Container, ref: str, script: str, *args: str, stdin: bytes,
                       stdout_path: Path | None = None) -> CallResult:
    """Run ``script`` with the toolset in a throwaway container of image ``ref`` (offline, as root): the image's
    own files, whatever the agent did to the trial's container."""
    toolset = await asyncio.to_thread(toolset_dir, find_busybox(container.options.toolset_busybox))
    return await container.cli.run(
        ["run", "--rm", "-i", "--network", "none", "-u", "0", "--label", "tackroom.managed=1", *mount_args(toolset),
         "--entrypoint", f"{BIN}/sh", "-e", f"PATH={BIN}", ref, "-c", script, "tackroom", *args],
        stdin=stdin, stdout_path=stdout_path, timeout=container.options.cli_timeout_sec * 2)


async def copy_from_image(container: Container, ref: str, wanted: list[str]) -> list[str]:
    """Put back in the sandbox's container what image ``ref`` holds at ``wanted`` ("R path": whatever is there,
    "T path": grader tools only, see :data:`IMAGE_FILES`); returns the paths put back."""
    cli, timeout = container.cli, container.options.cli_timeout_sec
    with tempfile.TemporaryDirectory(prefix="tackroom-docker-") as tmp:
        archive = Path(tmp) / "image-files.tar"
        read = await run_in_image(container, ref, IMAGE_FILES, stdin=_lines(wanted), stdout_path=archive)
        if not read.ok:
            raise SandboxError(f"could not read the image's tools from {ref} to restore them: {read.describe()}")
        if archive.stat().st_size == 0:
            return []
        with tarfile.open(archive) as tar:
            names = ["/" + m.name.removeprefix("./").lstrip("/") for m in tar.getmembers()]
        put = await cli.run(["cp", "-", f"{container.name}:/"], stdin=archive, timeout=timeout * 2)
        if not put.ok:
            await container.raise_if_gone_or(put, f"could not restore the image's tools from {ref} into {container.name}")
    asked = {w[2:] for w in wanted}
    direct = [n for n in names if n in asked]
    return direct + [n for n in names if n not in asked and not under(n, direct)]
