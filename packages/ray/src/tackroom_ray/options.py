"""``[runtime.ray]``: how trials are placed on a Ray cluster. Importing this never imports Ray."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RayOptions(BaseModel):
    """Options of the ``ray`` executor (``[runtime.ray]`` in a run config).

    ```toml
    [runtime]
    executor = "ray"
    [runtime.ray]
    num_cpus_per_trial = 0.2          # 5 agent loops per core, as the Mercor/SkyRL guide ran
    max_concurrency = 200             # trials of this run in flight across the cluster
    resources = { sandbox_host = 1 }  # only nodes started with --resources '{"sandbox_host": N}'
    ```
    """

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        default=None,
        description="Cluster to attach to ('auto', 'ray://head:10001', 'host:6379'), or 'local' to always start a "
        "private local cluster. None: attach to a running cluster if there is one (RAY_ADDRESS or a local "
        "`ray start`), else start a local one.",
    )
    num_cpus_per_trial: float = Field(default=0.2, gt=0, description="CPU share Ray reserves for each trial attempt")
    memory_mb_per_trial: int | None = Field(
        default=None, ge=1, description="Memory Ray reserves for each trial attempt (scheduling only, not a limit)")
    max_concurrency: int | None = Field(
        default=None, ge=1,
        description="Trials of this run in flight at once across the cluster (default: [runtime] concurrency)")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources each attempt needs: a label such as {sandbox_host = 1}, or "
        "{'node:10.0.0.5' = 0.01} to pin trials next to a node (e.g. the inference engine's)")
    node_id: str | None = Field(default=None, description="Run every attempt on this Ray node (hex node id)")
    soft_affinity: bool = Field(default=False, description="With node_id: fall back to other nodes when it is full or gone")
    runtime_env: dict[str, object] | None = Field(
        default=None, description="Ray runtime_env for the job (env_vars, py_modules, working_dir, ...)")
    local_num_cpus: int | None = Field(
        default=None, ge=1, description="CPUs of a locally started cluster (default: every core of this machine)")
    local_resources: dict[str, float] = Field(
        default_factory=dict, description="Custom resources of a locally started cluster (to try `resources` locally)")
    object_store_mb: int = Field(
        default=128, ge=80, description="Object store of a locally started cluster; trials move only small results")
    attempt_timeout_sec: float | None = Field(
        default=None, gt=0,
        description="Hard cap on one attempt's wall time once its worker starts; past it the worker is cancelled "
        "(an infra error, retried). Default: the sum of the attempt's phase timeouts plus deadline_grace_sec")
    deadline_grace_sec: float = Field(
        default=120.0, ge=0,
        description="Added to the sum of an attempt's phase timeouts; past it the driver cancels the worker")
