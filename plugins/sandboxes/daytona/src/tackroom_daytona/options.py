"""The ``[sandbox]`` section when ``name = "daytona"``."""

from __future__ import annotations

from pydantic import Field

from tackroom import PluginOptions


class DaytonaOptions(PluginOptions):
    """Options of the daytona sandbox; every field has a working default. Credentials are not options:
    the SDK's own ``DAYTONA_API_KEY`` (or ``DAYTONA_JWT_TOKEN`` + ``DAYTONA_ORGANIZATION_ID``),
    ``DAYTONA_API_URL`` and ``DAYTONA_TARGET`` are used."""

    default_image: str = Field(
        default="debian:bookworm-slim",
        description="Image for tasks with neither [environment].docker_image nor environment/Dockerfile",
    )
    max_concurrent: int = Field(default=50, gt=0, description="Sandboxes this provider keeps alive at once")
    auto_stop_minutes: int = Field(default=60, ge=0, description="Daytona stops an idle sandbox after this (0: never)")
    api_timeout_sec: float = Field(default=60.0, gt=0, description="Limit for one short SDK call (delete, preview link)")
    retries: int = Field(default=3, ge=1, description="Attempts for create/exec on transient errors")
    retry_wait_sec: float = Field(default=1.0, ge=0, description="First backoff between attempts (doubles)")
    preview_expires_sec: int = Field(default=3600, gt=0, description="Lifetime of the signed URL expose() returns")
    output_limit_bytes: int = Field(default=1_000_000, gt=0, description="Cap per stream of exec output")
    cleanup_label: str = Field(default="tackroom.managed", description="Label set to '1' on every sandbox; cleanup() deletes them")
