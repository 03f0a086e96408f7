"""tackroom-sandbox-kit: helpers for writing tackroom sandbox providers.

Not a plugin (it registers nothing): a library that sandbox plugins depend on, as tox keeps its helpers in
separate packages. Core (``tackroom``) holds the contract a sandbox implements (``Sandbox``,
``SandboxProvider``, ``ExecResult``, the sandbox errors); this kit holds what several implementations share:

- transfers that never follow what the agent planted (:class:`TarTransfer` for providers that move whole
  files, :func:`extract_tar` for tar archives coming out of a sandbox, the sandbox-side
  :data:`CHECK_TRANSFER_PATH` script);
- the grader's package managers reading only the image's configuration (:func:`install_env`), and the test
  tooling the agent installed removed before grading (:func:`is_test_tooling`, :func:`remove_added_tooling`);
- what a sandbox whose network namespace is a host process's serves into it, as a part it holds
  (:class:`NamespacePorts`): one host port forwarded into a sandbox that has no network (:func:`forward_into_namespace`);
- a network allowlist for such a sandbox: an egress proxy in tackroom's process on one port of its loopback
  (:class:`EgressProxy`, :class:`EgressRules`);
- host subprocesses with a hard timeout and capped output (:func:`run_process`);
- how a program ended, by itself or killed by a signal (:func:`describe_exit`, :func:`exit_signal`), for harnesses
  whose agent binary can crash;
- what providers backed by a remote service share: SDK calls under a timeout and retried
  (:func:`bounded_call`, :func:`retried_call`), one image per world (:func:`remote_image_key`), a stop that
  neither hangs nor is lost to a cancellation (:func:`stop_remote`), and the sandbox lifecycle around them
  (:class:`RemoteSandbox`: the provider's slot, a shielded create, a bounded stop);
- for harnesses whose agent is synchronous Python on the host: a blocking facade over the trial's sandbox
  (:class:`SyncSandbox`) and a runner that stops the agent's thread at the deadline or on cancellation
  (:func:`run_sync_agent`).
"""

from tackroom_sandbox_kit.egress import (
    EgressProxy,
    EgressRefused,
    EgressRules,
    proxy_env,
    serve_egress,
)
from tackroom_sandbox_kit.exit_status import CRASH_SIGNALS, describe_exit, exit_signal
from tackroom_sandbox_kit.host_forward import HostPortForward, forward_into_namespace
from tackroom_sandbox_kit.install_config import (
    INSTALL_CLEAN_ENV,
    PIP_CONFIG_FILES,
    UV_CONFIG_FILES,
    install_env,
    pip_env,
)
from tackroom_sandbox_kit.namespace_ports import NamespacePorts
from tackroom_sandbox_kit.process import ProcessOutput, drain_capped, kill_group, run_process, spawn_in_group
from tackroom_sandbox_kit.remote_calls import bounded as bounded_call
from tackroom_sandbox_kit.remote_calls import retried as retried_call
from tackroom_sandbox_kit.remote_sandbox import RemoteSandbox, remote_image_key, stop_remote
from tackroom_sandbox_kit.sync_agent import AgentDeadlineError, AgentStopped, SyncSandbox, run_sync_agent
from tackroom_sandbox_kit.tar_transfer import (
    CHECK_TRANSFER_PATH,
    TarTransfer,
    extract_tar,
    open_host_dir,
    transfer_check_error,
    transfer_check_stdin,
    upload_directories,
    write_file_safely,
)
from tackroom_sandbox_kit.test_tooling import (
    TEST_TOOLING,
    dist_folders,
    dist_name,
    is_test_tooling,
    record_paths,
    remove_added_tooling,
    tooling_note,
)

__all__ = [
    # The grader's package managers read only the image's configuration
    "install_env",
    "pip_env",
    "INSTALL_CLEAN_ENV",
    "PIP_CONFIG_FILES",
    "UV_CONFIG_FILES",
    # Test tooling the agent installed is not what grades
    "TEST_TOOLING",
    "is_test_tooling",
    "dist_name",
    "dist_folders",
    "remove_added_tooling",
    "record_paths",
    "tooling_note",
    # Transfers that never follow what the agent planted
    "TarTransfer",
    "extract_tar",
    "write_file_safely",
    "open_host_dir",
    "upload_directories",
    "transfer_check_error",
    "transfer_check_stdin",
    "CHECK_TRANSFER_PATH",
    # One host port forwarded into a sandbox without network
    "NamespacePorts",
    "HostPortForward",
    "forward_into_namespace",
    # A network allowlist: an egress proxy on one port inside a sandbox without network
    "EgressProxy",
    "EgressRules",
    "EgressRefused",
    "serve_egress",
    "proxy_env",
    # Host subprocesses
    "run_process",
    "ProcessOutput",
    "drain_capped",
    "kill_group",
    "spawn_in_group",
    # How a program ended (a crash by a signal)
    "describe_exit",
    "exit_signal",
    "CRASH_SIGNALS",
    # Providers backed by a remote service
    "bounded_call",
    "retried_call",
    "RemoteSandbox",
    "remote_image_key",
    "stop_remote",
    # A synchronous agent on the host over the trial's sandbox
    "run_sync_agent",
    "SyncSandbox",
    "AgentStopped",
    "AgentDeadlineError",
]
