"""A two-call helper for verifiers that want a "what the agent changed" report."""

from __future__ import annotations

import tackroom
from tackroom_file_diff.diff import changes_report
from tackroom_file_diff.documents import ReaderOptions
from tackroom_file_diff.report import ChangesReport, ReportLimits
from tackroom_file_diff.snapshot import DEFAULT_MAX_FILE_BYTES, Snapshot, take_snapshot


class FileChangeTracker:
    """Snapshots ``paths`` before the agent runs and reports the changes after.

    ::

        class MyVerifier(tackroom.Verifier):
            async def prepare(self, task, sandbox):
                self.tracker = FileChangeTracker(expected_outputs(task))  # tackroom_file_diff.expected_outputs
                await self.tracker.before(sandbox)

            async def verify(self, task, sandbox, trajectory):
                report = await self.tracker.after(sandbox)
                ... report.to_text(max_chars=6000) ...

    Without a ``before`` call every file found ``after`` is reported as added.
    """

    def __init__(self, paths: list[str], *, limits: ReportLimits | None = None, reader: ReaderOptions | None = None,
                 timeout: float = 120.0, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        self.paths = sorted(set(paths))
        self.limits = limits or ReportLimits()
        self.reader = reader or ReaderOptions()
        self.timeout = timeout
        self.max_file_bytes = max_file_bytes
        self.snapshot_before: Snapshot | None = None
        self.snapshot_after: Snapshot | None = None

    async def before(self, sandbox: tackroom.Sandbox) -> Snapshot:
        self.snapshot_before = await take_snapshot(sandbox, self.paths, timeout=self.timeout,
                                                   max_file_bytes=self.max_file_bytes)
        return self.snapshot_before

    async def after(self, sandbox: tackroom.Sandbox) -> ChangesReport:
        self.snapshot_after = await take_snapshot(sandbox, self.paths, timeout=self.timeout,
                                                  max_file_bytes=self.max_file_bytes)
        before = self.snapshot_before or Snapshot(
            paths=self.paths, notes=["no snapshot before the agent ran: every file is reported as added"]
        )
        return changes_report(before, self.snapshot_after, limits=self.limits, reader=self.reader)
