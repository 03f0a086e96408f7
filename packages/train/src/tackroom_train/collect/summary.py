"""What ``tackroom collect`` reports: per harness and per task, trials run, kept, demonstrations and trained tokens,
and per trial why it was kept or not. Printed as tables and written as JSON beside the dataset."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field
from rich.markup import escape
from rich.table import Table

ERROR_CLASSES = ("infra", "model", "task")


class TrialVerdict(BaseModel):
    """One trial: its outcome, whether it passed the threshold, what it gave."""

    trial_id: str
    task: str
    harness: str
    reward: float | None = None
    error_class: str | None = None
    error: str | None = None
    """``Type: message`` of the trial's error."""
    kept: bool = False
    """Ended without an error, with a reward at least ``min_reward``."""
    demonstrations: int = 0
    trained_tokens: int = 0
    how: str | None = None
    """``recorded`` (the recorded ids, copied) or ``rerendered`` (through the policy's chat template)."""
    reason: str | None = None
    """Why it was not kept, or gave no demonstration."""


class Counts(BaseModel):
    """The counts of one harness, one task, or all of them."""

    trials: int = 0
    kept: int = 0
    demonstrations: int = 0
    trained_tokens: int = 0
    rerendered: int = 0
    """Trials whose demonstrations were re-rendered (not copied)."""
    errors: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(ERROR_CLASSES, 0))

    def add(self, verdict: TrialVerdict) -> None:
        self.trials += 1
        self.kept += verdict.kept
        self.demonstrations += verdict.demonstrations
        self.trained_tokens += verdict.trained_tokens
        self.rerendered += verdict.how == "rerendered"
        if verdict.error_class is not None:
            self.errors[verdict.error_class] = self.errors.get(verdict.error_class, 0) + 1


class CollectSummary(BaseModel):
    """A collection: where it ran, what it wrote, the counts and every trial's verdict."""

    run_dir: str
    dataset: str | None = None
    """The dataset written; None when no trial gave a demonstration (nothing is written then)."""
    summary: str = ""
    tokenizer: str
    min_reward: float
    teacher: str
    harnesses: dict[str, Counts] = Field(default_factory=dict)
    tasks: dict[str, Counts] = Field(default_factory=dict)
    total: Counts = Field(default_factory=Counts)
    trials: list[TrialVerdict] = Field(default_factory=list)
    task_load_failures: list[dict[str, str]] = Field(default_factory=list)

    @classmethod
    def of(cls, verdicts: list[TrialVerdict], **fields: object) -> CollectSummary:
        summary = cls(trials=verdicts, **fields)  # type: ignore[arg-type]
        for v in verdicts:
            summary.harnesses.setdefault(v.harness, Counts()).add(v)
            summary.tasks.setdefault(v.task, Counts()).add(v)
            summary.total.add(v)
        return summary

    def problem(self) -> str | None:
        """Why nothing was written (None when a dataset was)."""
        if self.dataset is not None:
            return None
        total, where = self.total, f"; nothing written to the dataset, the summary is at {self.summary}"
        if not total.trials:
            return "no trial ran" + where
        if total.errors["infra"] == total.trials:
            first = next((v.error for v in self.trials if v.error), "")
            return (f"every trial ({total.trials}) failed on infra: the teacher ({self.teacher}) refused or failed "
                    f"({first}); check the endpoint and its model name (a teacher that serves only chat completions "
                    "needs [policy] gateway = false)" + where)
        if not total.kept:
            rewards = [v.reward for v in self.trials if v.reward is not None and v.error_class is None]
            best = f"best reward {max(rewards):.3g}" if rewards else "no trial ended without an error"
            return f"no trial reached min_reward {self.min_reward:g} ({best}; errors {total.errors})" + where
        reasons = Counter(v.reason for v in self.trials if v.kept and not v.demonstrations)
        listed = "; ".join(f"{n} × {r}" for r, n in reasons.most_common(3))
        return f"{total.kept} trial(s) passed but none gave a demonstration: {listed}" + where

    def write(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")


def summary_tables(summary: CollectSummary) -> list[Table]:
    """Per harness (with the total) and per task."""
    tables = []
    for title, rows in ((f"collect {escape(summary.run_dir)}: per harness", summary.harnesses),
                        ("per task", summary.tasks)):
        first = "harness" if rows is summary.harnesses else "task"
        table = Table(first, "trials", "kept", "demonstrations", "trained tokens", "re-rendered", "errors", title=title)
        for name, counts in rows.items():
            table.add_row(escape(name), *_cells(counts))
        if rows is summary.harnesses and len(rows) > 1:
            table.add_row("[bold]total[/]", *_cells(summary.total))
        tables.append(table)
    return tables


def _cells(counts: Counts) -> list[str]:
    errors = ", ".join(f"{n} {c}" for c, n in counts.errors.items() if n) or "-"
    return [str(counts.trials), str(counts.kept), str(counts.demonstrations), str(counts.trained_tokens),
            str(counts.rerendered), errors]
