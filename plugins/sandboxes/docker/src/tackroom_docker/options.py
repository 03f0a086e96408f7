"""The ``[sandbox]`` section when ``name = "docker"``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tackroom import PluginOptions


class DockerOptions(PluginOptions):
    """Options of the docker sandbox; every field has a working default."""

    docker_binary: str = Field(default="docker", description="The docker CLI to call")
    default_image: str = Field(
        default="debian:bookworm-slim",
        description="Image for tasks with neither [environment].docker_image nor environment/Dockerfile",
    )
    pull: Literal["missing", "never"] = Field(
        default="missing", description="Pull an image that is not present locally ('missing') or fail at once ('never')"
    )
    pull_timeout_sec: float = Field(default=300.0, gt=0)
    network_mode: Literal["none", "host"] | None = Field(
        default=None,
        description="Override the container network; default: 'none', or 'host' when the task allows internet",
    )
    egress_hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Names a network allowlist's proxy resolves from this table before DNS (name = IP address, like "
        "--add-host; may point at the host's own addresses, e.g. a local mirror)",
    )
    build_network: Literal["host", "none", "default"] = Field(
        default="host", description="Network for RUN steps of `docker build` ('host' lets apt-get reach a mirror)"
    )
    output_limit_bytes: int = Field(default=1_000_000, gt=0, description="Cap per stream of exec output")
    stop_timeout_sec: int = Field(
        default=1, ge=0, description="Grace period a plain `docker stop` gives the container (teardown itself kills)"
    )
    init: bool = Field(
        default=False,
        description="Run docker's init (tini) as PID 1 (--init). Off: PID 1 is the sandbox's own keeper shell, which "
        "reaps orphans and which nothing inside the container can signal; tini forwards signals, so with it an agent "
        "can end its own container",
    )
    pids_limit: int | None = Field(
        default=1024,
        ge=16,
        description="Most processes and threads the container may hold at once (--pids-limit): a fork bomb stays bounded; "
        "None: unlimited",
    )
    no_new_privileges: bool = Field(
        default=True,
        description="--security-opt no-new-privileges: setuid/setgid binaries and file capabilities grant nothing",
    )
    cap_drop: list[str] = Field(
        default_factory=lambda: ["NET_RAW", "MKNOD", "AUDIT_WRITE", "SETFCAP"],
        description="Capabilities removed from Docker's default set (--cap-drop): raw sockets, device nodes, audit "
        "records, file capabilities; what apt-get, pip and compilers need stays",
    )
    keep_entrypoint: bool = Field(
        default=False, description="Keep the image's ENTRYPOINT (it must exec its arguments) instead of replacing it"
    )
    toolset_busybox: str | None = Field(
        default=None,
        description="The static busybox mounted read-only at /.tackroom in every container for the sandbox's root "
        "helpers (kill, restore, transfer checks, grading set-up); default: busybox on PATH (Debian's busybox-static)",
    )
    cli_timeout_sec: float = Field(default=60.0, gt=0, description="Limit for short engine calls (inspect, rm, ps)")
    settle_sec: float = Field(
        default=10.0, ge=0, le=60,
        description="At the end of the agent's turn, when the task keeps its services: how long busy processes get, "
        "at most, to settle (a server still starting opens its socket) before those not listening are killed",
    )
    cleanup_scope: Literal["orphans", "all"] = Field(
        default="orphans",
        description="cleanup() removes containers whose creating process is gone ('orphans') or every labelled one",
    )
    extra_run_args: list[str] = Field(default_factory=list, description="Appended to `docker run` (e.g. --shm-size=1g)")
