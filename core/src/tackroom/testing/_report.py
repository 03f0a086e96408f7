"""What every conformance kit reports: one result per check, a report that lists the failures, one way to time a check."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Iterable

from pydantic import BaseModel

SKIPPED_BY_REQUEST = "skipped by skip="


class SkipCheck(Exception):
    """Raised by a check that cannot apply to the plugin at hand; the report lists it as skipped, with the reason."""


class CheckResult(BaseModel):
    """One check: its name, whether it passed (or was skipped: it cannot apply), why not, and how long it took."""

    name: str
    passed: bool
    message: str = ""
    duration_s: float = 0.0
    skipped: bool = False
    """The check cannot apply to this plugin (``message`` says why); neither passed nor failed."""

    @classmethod
    def skipped_because(cls, name: str, why: str = SKIPPED_BY_REQUEST) -> CheckResult:
        return cls(name=name, passed=False, skipped=True, message=why)


class CheckReport(BaseModel):
    """Every check's result; each kit's report adds what it checked (``subject`` names it in the failure message)."""

    results: list[CheckResult]

    @property
    def subject(self) -> str:
        """What was checked, as the failure message names it."""
        return "the plugin"

    @property
    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not r.passed and not r.skipped]

    @property
    def skipped(self) -> list[CheckResult]:
        return [r for r in self.results if r.skipped]

    def result(self, name: str) -> CheckResult:
        """The result of the check called ``name``."""
        for r in self.results:
            if r.name == name:
                return r
        raise KeyError(f"no check {name!r} in this report; it has {[r.name for r in self.results]}")

    def assert_ok(self) -> None:
        """Raise ``AssertionError`` naming every failed check and its reason."""
        if self.failures:
            lines = "\n".join(f"  - {r.name}: {r.message}" for r in self.failures)
            raise AssertionError(f"{self.subject} failed {len(self.failures)} conformance check(s):\n{lines}")


def known_skips(kind: str, skip: Iterable[str], known: Iterable[str]) -> set[str]:
    """``skip`` as a set; a name that is no check of this kit is refused, listing the checks there are."""
    skip, known = set(skip), list(known)
    if unknown := skip - set(known):
        raise ValueError(f"unknown {kind} checks {sorted(unknown)}; known: {', '.join(known)}")
    return skip


async def timed_check(name: str, check: Awaitable[None], limit: float) -> CheckResult:
    """Run one check under ``limit`` seconds: passed, skipped (:class:`SkipCheck`) or failed with the reason.

    Every failure is reported and none stops the suite: an ``AssertionError`` by its message, a check that runs
    out of time as such, anything else by its type and message.
    """
    started = time.monotonic()
    try:
        await asyncio.wait_for(check, limit)
    except SkipCheck as exc:
        return CheckResult.skipped_because(name, str(exc)).model_copy(update={"duration_s": _since(started)})
    except AssertionError as exc:
        message = str(exc) or "assertion failed"
    except TimeoutError as exc:
        message = f"TimeoutError: {exc}" if str(exc) else f"did not finish within {limit:g}s"
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
    else:
        return CheckResult(name=name, passed=True, duration_s=_since(started))
    return CheckResult(name=name, passed=False, message=message, duration_s=_since(started))


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)
