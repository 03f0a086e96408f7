"""The sandbox interface: where a harness's actions happen and a verifier looks.

Every method has a timeout and fails the same way on every provider:

- :class:`SandboxTimeoutError` (a ``TimeoutError``): a command or transfer ran
  past its limit; the sandbox killed it and is still usable.
- :class:`SandboxPathError` (a ``PermissionError``): a path escapes the allowed
  roots (``..`` traversal, absolute path outside the sandbox, link escape).
- :class:`SandboxError` (an :class:`~tackroom._errors.InfraError`): the sandbox
  itself failed (died, could not start, transfer broke); the trial is retried.

Large command output is capped, never fatal (``ExecResult.truncated``).
"""

from __future__ import annotations

import abc
import contextlib
import inspect
import ipaddress
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tackroom._errors import ModelError, SandboxError, SandboxPathError, TaskError
from tackroom._plugin import Plugin, PluginKind

DEFAULT_EXEC_TIMEOUT = 600.0


class GradingSabotagedError(ModelError):
    """The agent left the sandbox so that it cannot be graded (a FIFO where the verifier reads, a folder
    that cannot be emptied, a grader that only fails on what the agent touched): the model's failure, reward 0."""


class GraderBrokenError(TaskError):
    """Grading failed on an untouched environment too: the task's grader is broken on its own."""


class SandboxExhaustedError(ModelError):
    """The agent used up what the sandbox allows (every pid, the disk) so that a runtime step failed: reward 0.
    Raised only with evidence (a full pid or disk limit); without it a failed step is a :class:`SandboxError`."""


NetworkMode = Literal["none", "public", "allowlist"]
"""``none``: loopback only. ``public``: the internet. ``allowlist``: only :attr:`NetworkPolicy.allowed_hosts`."""


def _host_entry(entry: str) -> bool:
    """An ``allowed_hosts`` entry: an IP address or CIDR, or DNS labels (``[a-z0-9_-]``) after an optional ``*.``."""
    with contextlib.suppress(ValueError):
        return bool(ipaddress.ip_network(entry, strict=False))
    return all(s.isascii() and s.replace("-", "").replace("_", "").isalnum() and s.strip("-") == s
               for s in entry.removeprefix("*.").split("."))


class NetworkPolicy(BaseModel):
    """What a phase of a trial (the agent's turn, grading) may reach over the network."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: NetworkMode = "none"
    """Harbor's ``no-network`` is read as ``none``."""
    allowed_hosts: tuple[str, ...] = ()
    """Reachable with ``mode = "allowlist"``, any port: host names (``*.example.org``: the names below it), IP
    addresses and CIDRs (no URLs or ports); tackroom_sandbox_kit's egress module says how each is matched."""

    @field_validator("mode", mode="before")
    @classmethod
    def _harbor_mode(cls, v: Any) -> Any:
        return "none" if v == "no-network" else v

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts(cls, v: Any) -> Any:
        hosts = [str(h).strip().lower().rstrip(".") for h in (v or ())]
        if bad := [h for h in hosts if not _host_entry(h)]:
            raise ValueError(f"allowed_hosts holds {bad}: give host names ('*.' for subdomains), IP addresses, CIDRs, "
                             "not URLs or ports")
        return tuple(dict.fromkeys(hosts))

    @model_validator(mode="after")
    def _hosts_only_with_allowlist(self) -> NetworkPolicy:
        if self.allowed_hosts and self.mode != "allowlist":
            raise ValueError(f"allowed_hosts {list(self.allowed_hosts)} need mode \"allowlist\", not {self.mode!r}")
        if self.mode == "allowlist" and not self.allowed_hosts:
            raise ValueError("mode \"allowlist\" needs at least one entry in allowed_hosts")
        return self

    @property
    def online(self) -> bool:
        return self.mode != "none"

    def describe(self) -> str:
        """``no network``, ``the internet`` or ``only a.example, b.example`` (for notes and errors)."""
        return {"none": "no network", "public": "the internet"}.get(self.mode) or f"only {', '.join(self.allowed_hosts)}"


class ExecResult(BaseModel):
    """What a command did. Output beyond the provider's cap is cut and ``truncated`` set."""

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class SandboxSpec(BaseModel):
    """What to start: the task environment plus the limits the runtime applies."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    """A unique, label-safe name (the trial id)."""
    environment_dir: Path | None = None
    """The task's ``environment/`` (Dockerfile + the files it COPYs), if any."""
    image: str | None = None
    """A prebuilt image reference; wins over ``environment_dir``."""
    cpus: float = 1.0
    memory_mb: int = 2048
    storage_mb: int | None = None
    """Disk the sandbox's writable files may use; writing past it fails inside (ENOSPC). A provider that
    cannot enforce it says so in the sandbox's notes."""
    network: NetworkPolicy = NetworkPolicy()
    """The agent phase's network: what :meth:`Sandbox.start` sets up (grading may differ: :meth:`Sandbox.set_network`).
    ``allowlist`` reaches only providers with the ``network_allowlist`` capability (the runtime refuses it first)."""
    force_build: bool = False
    """Build ``environment_dir`` even when ``image`` is set (Harbor's ``--force-build``)."""
    build_timeout_sec: float = 600.0
    start_timeout_sec: float = 120.0
    workdir: str = "/app"
    env: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)
    mounts: dict[str, Path] = Field(default_factory=dict)
    """Host folders bound read-only at start, by sandbox path (absolute, outside the task's own folders: ``/mnt/...``):
    what a harness prepared once for many trials (:meth:`~tackroom.Harness.mounts`). Only a
    :class:`~tackroom.sandbox_features.ReadOnlyMounts` sandbox gets any; nothing inside it can change their files
    or unmount them, and a link in them resolves inside the sandbox. Their files must be readable by every uid."""

    @field_validator("mounts")
    @classmethod
    def _mount_paths(cls, v: dict[str, Path]) -> dict[str, Path]:
        import posixpath

        for path, host in v.items():
            if not path.startswith("/") or path.startswith("//") or path == "/" or posixpath.normpath(path) != path \
                    or "\x00" in path:
                raise ValueError(f"mount path {path!r} is not a normalised absolute sandbox path below /")
            if not host.is_absolute():
                raise ValueError(f"mount {path!r}: the host folder {str(host)!r} is not an absolute path")
        return v

    @model_validator(mode="before")
    @classmethod
    def _allow_internet(cls, data: Any) -> Any:
        """The older ``allow_internet`` input: ``True`` is ``network = NetworkPolicy(mode="public")``."""
        if isinstance(data, dict) and "allow_internet" in data:
            data = dict(data)
            allow = data.pop("allow_internet")
            if "network" in data and bool(allow) != NetworkPolicy.model_validate(data["network"]).online:
                raise ValueError(f"allow_internet = {allow} contradicts network = {data['network']!r}; give only network")
            data.setdefault("network", NetworkPolicy(mode="public" if allow else "none"))
        return data

    @property
    def allow_internet(self) -> bool:
        """``network.mode == "public"`` (for callers written before :attr:`network`)."""
        return self.network.mode == "public"


GRADER_SCRUBBED_ENV = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE",
                       "PERL5LIB", "PERL5OPT", "PERLLIB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
                       "BASH_ENV", "ENV", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT")
"""Variables the grader's command never inherits (:meth:`Sandbox.run_grader`): each makes an interpreter or the
dynamic loader run code from a path; only the task's ``[verifier] env`` may set them."""
GRADER_CLEAN_ENV = {"PYTHONNOUSERSITE": "1"}
"""Set for the grader's command (no user site-packages, whatever HOME holds)."""

KILL_ALL_SCRIPT = r"""
# Every step is a bash builtin: a fork bomb that holds every free pid cannot make this script fail to fork.
for _ in $(seq 1 100); do
    kill -9 -1 2>/dev/null  # every process but PID 1 and this shell, at once
    left=""
    for d in /proc/[0-9]*; do
        p=${d#/proc/}
        if [ "$p" = 1 ] || [ "$p" = "$$" ]; then continue; fi
        read -r line < "$d/stat" 2>/dev/null || continue
        rest=${line##*) }  # after the last ")": a process name may hold spaces and parentheses
        state=${rest%% *}
        if [ "$state" = Z ] || [ "$state" = X ]; then continue; fi  # dead, waiting to be reaped
        left="$left $p"
    done
    if [ -z "$left" ]; then exit 0; fi
done
echo "still alive after SIGKILL:$left"
# A pid limit the agent's processes fill is the agent's doing (reported so; see SandboxExhaustedError).
read -r most < /sys/fs/cgroup/pids.max 2>/dev/null && read -r now < /sys/fs/cgroup/pids.current 2>/dev/null \
    && [ "$most" != max ] && [ "$now" -ge $((most - 2)) ] && echo "pids exhausted ($now of $most)"
exit 1
"""
"""What :meth:`Sandbox.kill_processes` runs by default (bash, inside the sandbox, as its exec user)."""


class Sandbox(abc.ABC):
    """A started (or startable) sandbox. Create one through :meth:`SandboxProvider.create`."""

    spec: SandboxSpec
    notes: list[str]
    """Things a user should know about this sandbox's fidelity (e.g. an ignored FROM line)."""
    binds_mounts: ClassVar[bool] = False
    """Whether :meth:`start` binds :attr:`SandboxSpec.mounts` (:class:`~tackroom.sandbox_features.ReadOnlyMounts`)."""

    def __init__(self, spec: SandboxSpec) -> None:
        self.spec = spec
        self.notes = []

    @abc.abstractmethod
    async def start(self) -> None:
        """Build (if needed) and start. Raises :class:`SandboxError` / :class:`SandboxTimeoutError`."""

    @abc.abstractmethod
    async def exec(
        self,
        cmd: str | list[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = DEFAULT_EXEC_TIMEOUT,
        stdin: str | bytes | None = None,
    ) -> ExecResult:
        """Run ``cmd`` (a string goes through ``bash -c``). A non-zero exit is not an error.

        Raises :class:`SandboxTimeoutError` when ``timeout`` passes (the
        command is killed first), :class:`SandboxError` when the sandbox is gone.
        """

    @abc.abstractmethod
    async def upload(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        """Copy a local file or directory to ``dest`` (a directory's contents land in ``dest``)."""

    @abc.abstractmethod
    async def download(self, source: str, dest: Path, *, timeout: float = 120.0) -> None:
        """Copy a sandbox file or directory to local ``dest``.

        Raises :class:`FileNotFoundError` when ``source`` does not exist.
        """

    async def write_file(self, path: str, content: str | bytes, *, timeout: float = 60.0) -> None:
        """Write one file (parents created)."""
        import tempfile

        data = content.encode() if isinstance(content, str) else content
        with tempfile.TemporaryDirectory(prefix="tackroom-") as tmp:
            local = Path(tmp) / "file"
            local.write_bytes(data)
            await self.upload(local, path, timeout=timeout)

    async def read_file(self, path: str, *, timeout: float = 60.0) -> bytes:
        """Read one file. Raises :class:`FileNotFoundError` when it does not exist."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="tackroom-") as tmp:
            local = Path(tmp) / "file"
            await self.download(path, local, timeout=timeout)
            if local.is_dir():
                raise IsADirectoryError(path)
            return local.read_bytes()

    async def expose(self, port: int) -> str:
        """Return a URL the harness (on the host) can reach for ``port`` inside the sandbox."""
        raise NotImplementedError(f"{type(self).__name__} cannot expose ports")

    async def forward_host_port(self, port: int) -> str:
        """A base URL (``http://127.0.0.1:P``) that reaches the host's ``127.0.0.1:port`` from inside the sandbox.

        For harnesses whose agent runs inside the sandbox and calls the policy on the host (the
        ``agent_in_sandbox`` capability). A sandbox without network gets that one port and nothing else of
        the host (no route, no other port, no internet); the forward ends with :meth:`kill_processes` (the end
        of the agent's turn) or :meth:`stop`. Sandboxes that cannot do it raise ``NotImplementedError`` (this
        default); tackroom-sandbox-kit's ``NamespacePorts`` implements it.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot forward a host port into the sandbox")

    async def snapshot(self, paths: list[str], *, timeout: float = 120.0) -> bytes:
        """Return a tar archive (bytes) of ``paths``; paths that do not exist are skipped."""
        import shlex

        existing = " ".join(shlex.quote(p) for p in paths)
        # A fresh directory (mktemp -d) for the archive: a fixed path could be a planted link or FIFO.
        script = (f'd=$(mktemp -d /tmp/.tackroom-snapshot.XXXXXXXX) || exit 1; echo "$d"; '
                  f'for p in {existing}; do [ -e "$p" ] && printf "%s\\0" "$p"; done '
                  f'| tar --null -cf "$d/snapshot.tar" -T - 2>/dev/null || tar -cf "$d/snapshot.tar" -T /dev/null')
        result = await self.exec(script, timeout=timeout)
        folder = result.stdout.strip().splitlines()[0] if result.stdout.strip() else ""
        if not result.ok or not folder.startswith("/tmp/.tackroom-snapshot."):
            raise SandboxError(f"snapshot of {paths} failed: {result.stderr.strip()}")
        try:
            return await self.read_file(f"{folder}/snapshot.tar", timeout=timeout)
        finally:
            await self.exec(f"rm -rf {shlex.quote(folder)}", timeout=30)

    async def restore_image_tools(self, keep: list[str] | None = None) -> list[str] | None:
        """Before grading in this sandbox: make the image's executables and libraries the ones that run.

        An agent that replaced ``grep`` (or planted one earlier on ``PATH``, or changed a library) must not
        steer the grader. Returns what was restored or removed (for the trial's notes), ``[]`` when nothing
        needed it, and ``None`` when this sandbox cannot do it (the default): the runtime then notes that
        grading used tools the agent could change (``[verifier] grading = "separate"`` avoids that). Paths
        under ``keep`` (the task's ``grading_paths``) are left as the agent made them; what the agent added
        elsewhere stays too (paths compared by their real location, as on merged-``/usr`` images).

        An implementation covers every executable, shared library and interpreter module the image holds,
        wherever it lies, without trusting a listing the agent could shorten; removes the interpreter start-up
        hooks the agent added (``sitecustomize``, ``*.pth``, a module earlier on ``sys.path`` or ``@INC``, ...)
        and restores the shell start-up files in ``/etc`` (``profile``, ``profile.d``, ``bash.bashrc``, ``skel``);
        and uninstalls the test tooling the agent installed (a fake ``pytest``, a ``pytest11`` plugin), under
        ``keep`` too (the kit's ``added_test_tooling`` check; ``tackroom_sandbox_kit.remove_added_tooling``).
        """
        return None

    async def fresh_folder(self, path: str, *, timeout: float = 60.0) -> None:
        """Make ``path`` an empty directory, whatever the agent left there (files, links, a FIFO, a mount's contents).

        Verifiers call it before they upload into a folder (a planted ``conftest.py`` in ``/tests`` is gone); a
        planted link is removed, not its target. Raises :class:`GradingSabotagedError` (``model``, reward 0)
        when the agent left ``path`` so that it cannot be emptied.
        """
        import shlex

        q = shlex.quote(path)
        result = await self.exec(f"rm -rf {q} 2>/dev/null; mkdir -p {q} && [ -d {q} ] && [ ! -L {q} ] && l=$(ls -A {q}) && [ -z \"$l\" ]",
                                 cwd="/", timeout=timeout)
        if not result.ok:
            raise GradingSabotagedError(f"the agent left {path} so that it cannot be recreated empty (exit "
                                        f"{result.exit_code}: {(result.stderr or result.stdout).strip()[:300]}); graded 0")

    async def upload_pristine(self, source: Path, dest: str, *, timeout: float = 120.0) -> None:
        """:meth:`fresh_folder` then :meth:`upload`: ``dest`` holds exactly the files of ``source`` (a folder)."""
        await self.fresh_folder(dest, timeout=min(timeout, 60.0))
        await self.upload(source, dest, timeout=timeout)

    async def kill_processes(self, *, timeout: float = 10.0, keep_listening: bool = False) -> list[str]:
        """Kill every process started inside the sandbox and confirm they are gone; the sandbox stays usable.

        ``keep_listening=True`` (the end of the agent's turn, for a task that keeps its services): every
        process that holds a listening socket (TCP listen, bound UDP, listening unix stream/seqpacket socket)
        stays, with its threads and the processes sharing that socket, but frozen (SIGSTOP or the cgroup
        freezer) so that it changes nothing until :meth:`run_grader` runs; every other process is killed and
        confirmed gone. Returns one line per kept process (``"pid 12 nginx: tcp 0.0.0.0:80"``); ``[]`` with
        ``keep_listening=False``. A sandbox that cannot keep services raises ``NotImplementedError`` for
        ``keep_listening=True`` (this default); the runtime then kills everything and notes it.

        The runtime calls it when the agent's turn ends, however it ends, so nothing the agent started (background
        jobs, ``setsid`` children, tmux servers) changes the sandbox while it is graded. This default runs
        :data:`KILL_ALL_SCRIPT`, as root in the sandbox's own pid namespace under a PID 1 that starts no children.

        Raises :class:`SandboxError` when processes survive ``timeout`` (a trial must not be graded then),
        :class:`SandboxExhaustedError` (``model``) when they survive because the agent holds every pid the
        sandbox allows, and :class:`SandboxTimeoutError` when the sandbox does not answer within it.
        """
        if keep_listening:
            raise NotImplementedError(f"{type(self).__name__} cannot keep listening processes into grading")
        result = await self.exec(KILL_ALL_SCRIPT, timeout=timeout)
        if result.exit_code != 0:
            said = (result.stdout + result.stderr).strip()[:500]
            if "pids exhausted" in said:
                raise SandboxExhaustedError(f"the agent holds every pid the sandbox allows, so its processes could not "
                                            f"all be killed ({said}); graded 0")
            raise SandboxError(f"processes survived kill_processes(): {said}")
        return []

    async def set_network(self, policy: NetworkPolicy, *, timeout: float = 60.0) -> None:
        """From now on the sandbox's processes reach what ``policy`` allows.

        The runtime calls it between phases (after the agent's processes are stopped, before grading) when the
        grading phase's policy differs from the agent's (:attr:`SandboxSpec.network`); ``allowlist`` only where
        the provider declares ``network_allowlist``. This default raises ``NotImplementedError``: the runtime then
        notes that grading ran with the agent phase's network.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot change its network once started")

    async def run_grader(self, cmd: list[str], *, private: list[str], collect: str, dest: Path,
                         cwd: str | None = None, env: dict[str, str] | None = None,
                         timeout: float = DEFAULT_EXEC_TIMEOUT, graded: list[str] | tuple[str, ...] = ()) -> ExecResult:
        """Run the grader's command (``test.sh``) so that nothing the agent left running can steer it.

        - Each folder in ``private`` is, for this command and its children only, a private copy of what it
          holds now (taken while kept services are still frozen); no other process in the sandbox can see or
          write it (a private mount namespace with tmpfs copies, or the sandbox's equivalent).
        - Services kept by ``kill_processes(keep_listening=True)`` are resumed once the private view exists,
          for the command's duration, and frozen again when it ends. While any is kept, each of ``graded`` (what
          the command reads: the working directory, ``grading_paths``) is for the command a copy taken while they
          were frozen, so what they write there meanwhile is never graded; with none kept, ``graded`` is unused.
        - The command starts clean: ``HOME`` is a fresh private folder holding only a copy of the image's
          ``/etc/skel`` (so a login shell a test starts reads a ``.profile`` that sources ``~/.bashrc``, as in
          the image's own home, and nothing the agent put in its home: ``.gitconfig`` hooks, ``pip.conf``, rc
          files), :data:`GRADER_CLEAN_ENV` is set, none of :data:`GRADER_SCRUBBED_ENV` comes from anywhere but
          ``env`` (which may also set ``HOME``); bash reads no rc files.
        - When it ends, the private copy of ``collect`` (one of ``private``) is copied to the host folder
          ``dest`` (regular files and folders only, never following links); the reward is read there, and
          whatever the sandbox's own ``collect`` holds is never read.

        This default is for sandboxes that kept nothing running (``kill_processes()`` killed everything): it
        runs the command with the clean environment, kills what it left running, then downloads ``collect``
        to ``dest``. Sandboxes that implement ``keep_listening`` must override it. Raises
        :class:`SandboxTimeoutError` past ``timeout``, :class:`FileNotFoundError` when ``collect`` is gone.
        """
        import secrets
        import shlex

        if collect not in private:
            raise ValueError(f"collect {collect!r} must be one of private {private}")
        home = f"/tmp/.tackroom-grader-home-{secrets.token_hex(6)}"
        await self.fresh_folder(home)
        unset = " ".join(f"-u {name}" for name in GRADER_SCRUBBED_ENV)
        assign = " ".join(shlex.quote(f"{k}={v}") for k, v in {"HOME": home, **GRADER_CLEAN_ENV, **(env or {})}.items())
        result = await self.exec(["/bin/sh", "-c", f"cp -a /etc/skel/. {home}/ 2>/dev/null; "
                                  f"exec /usr/bin/env {unset} {assign} {shlex.join(cmd)}"], cwd=cwd, timeout=timeout)
        await self.kill_processes()
        await self.download(collect, dest)
        return result

    @abc.abstractmethod
    async def stop(self) -> None:
        """Tear down; idempotent, safe to call on a sandbox that never started or already died."""

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _Feature(abc.ABC):  # noqa: B024 (nothing to implement: isinstance goes through __subclasshook__)
    """An optional sandbox feature, checked with ``isinstance``: a sandbox has it when its class implements the
    feature's method or sets its flag (overrides :class:`Sandbox`'s default, which answers "cannot"). A sandbox that has a feature
    in general but not right now (local keeps services only when tackroom runs as root) still raises
    ``NotImplementedError`` from the method, and the runtime treats that as not having it."""

    method: ClassVar[str] = ""

    @classmethod
    def __subclasshook__(cls, sub: type) -> bool:
        if not issubclass(sub, Sandbox) or not cls.method:
            return NotImplemented
        own = getattr(sub, cls.method, None)
        if own is None or own is getattr(Sandbox, cls.method):
            return False
        # kill_processes is every sandbox's; keeping services is overriding it with keep_listening (contract 3)
        return cls.method != "kill_processes" or "keep_listening" in inspect.signature(own).parameters


class NetworkSwitch(_Feature):
    """Changes its network once started (:meth:`Sandbox.set_network`): grading on a network of its own."""

    method = "set_network"


class ServiceKeeper(_Feature):
    """Keeps the agent's listening processes, frozen, into grading: its class overrides
    :meth:`Sandbox.kill_processes` and takes ``keep_listening``."""

    method = "kill_processes"


class ToolRestorer(_Feature):
    """Puts the image's tools back before grading (:meth:`Sandbox.restore_image_tools`)."""

    method = "restore_image_tools"


class PortForwarder(_Feature):
    """Forwards one host port into the sandbox (:meth:`Sandbox.forward_host_port`), for agents inside it."""

    method = "forward_host_port"


class PortExposer(_Feature):
    """Publishes a port of the sandbox to the host (:meth:`Sandbox.expose`)."""

    method = "expose"


class ReadOnlyMounts(_Feature):
    """Binds :attr:`SandboxSpec.mounts` read-only at start (its class sets ``binds_mounts = True``); the runtime asks
    the harness for mounts (:meth:`~tackroom.Harness.mounts`) only for such a sandbox."""

    method = "binds_mounts"


class SandboxProvider(Plugin):
    """A sandbox plugin: makes :class:`Sandbox` objects from a :class:`SandboxSpec`.

    Creating must be cheap and import-light (heavy SDKs load in ``start``).
    """

    kind: ClassVar[PluginKind] = "sandbox"

    @abc.abstractmethod
    def create(self, spec: SandboxSpec) -> Sandbox:
        """Return an unstarted sandbox for ``spec``."""

    async def cleanup(self) -> int:
        """Remove leaked sandboxes this provider labelled; return how many were removed."""
        return 0

    def refuses(self, task: Any) -> str | None:
        """Why this provider cannot run ``task`` (a :class:`~tackroom.Task`) as it asks, beyond what its
        capabilities say (an environment it cannot build), else ``None`` (this default). Asked once per task
        before a run starts (``tackroom_app.sandbox_refusal``); a refused task is a task error named up front."""
        return None


def check_relative_inside(path: str, root: str = "/") -> str:
    """Normalise a sandbox path and reject ``..`` escapes; returns the absolute path."""
    import posixpath

    if "\x00" in path:
        raise SandboxPathError(f"path {path!r} contains a NUL byte")
    full = posixpath.normpath(posixpath.join(root, path))
    if full != root and not full.startswith(root.rstrip("/") + "/"):
        raise SandboxPathError(f"path {path!r} escapes {root}")
    if ".." in path.split("/"):
        raise SandboxPathError(f"path {path!r} contains '..'; use a path without parent references")
    return full

