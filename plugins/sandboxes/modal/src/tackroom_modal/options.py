"""The ``[sandbox]`` section when ``name = "modal"``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tackroom import PluginOptions


class ModalOptions(PluginOptions):
    """Options of the modal sandbox; every field has a working default. Credentials are not options:
    Modal's own ``MODAL_TOKEN_ID``/``MODAL_TOKEN_SECRET`` or ``~/.modal.toml`` are used."""

    app_name: str = Field(default="tackroom", description="Modal app the sandboxes belong to (created if missing)")
    environment_name: str | None = Field(default=None, description="Modal environment; None: the profile's default")
    default_image: str = Field(
        default="debian:bookworm-slim",
        description="Image for tasks with neither [environment].docker_image nor environment/Dockerfile",
    )
    registry: Literal["public", "aws_ecr", "gcp_artifact_registry"] = Field(
        default="public", description="Where image references are pulled from; private ones need registry_secret"
    )
    registry_secret: str | None = Field(
        default=None,
        description="Name of a modal.Secret holding registry credentials (REGISTRY_USERNAME/REGISTRY_PASSWORD, or AWS keys for ECR)",
    )
    max_concurrent: int = Field(default=100, gt=0, description="Sandboxes this provider keeps alive at once")
    sandbox_timeout_sec: int = Field(default=3600, gt=0, description="Modal kills a sandbox older than this")
    api_timeout_sec: float = Field(default=60.0, gt=0, description="Limit for one short SDK call (lookup, terminate, tunnels)")
    retries: int = Field(default=3, ge=1, description="Attempts for create/exec on transient errors")
    retry_wait_sec: float = Field(default=1.0, ge=0, description="First backoff between attempts (doubles)")
    expose_ports: list[int] = Field(
        default_factory=list, description="Ports opened as encrypted tunnels at create; expose() works only for these"
    )
    output_limit_bytes: int = Field(default=1_000_000, gt=0, description="Cap per stream of exec output")
    cleanup_tag: str = Field(default="tackroom.managed", description="Tag set to '1' on every sandbox; cleanup() terminates them")
