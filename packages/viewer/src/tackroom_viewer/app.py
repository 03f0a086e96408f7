"""The viewer's web app (Starlette + Jinja2): runs, a run's trials with filters, its task grid and training curve,
one trial, two trials side by side.

Every request reads the run folders again (a running job shows up). Trajectories are hostile content: every
template autoescapes, and each page is served with a Content-Security-Policy that allows no script at all, so even
markup that slipped through would not run. The app answers only to the host names it was started for
(a web page elsewhere cannot reach it through DNS rebinding).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from tackroom_viewer.curve import reward_curve
from tackroom_viewer.run_folders import (
    RunFolder,
    TrialFilter,
    TrialSummary,
    find_runs,
    inside,
    read_regular,
    run_of,
    task_grid,
    trial_at,
)
from tackroom_viewer.token_text import Tokenizers, decoder_for, tokenizer_name
from tackroom_viewer.trial_view import pretty, trial_page

SECURITY_HEADERS = {
    # no script may run on any page: the pages use none, and a trajectory's markup must never become code
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
RAW_FILES = ("result.json", "trajectory.json")


def _reward(value: Any) -> str:
    return "–" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:.3f}"


def _seconds(value: Any) -> str:
    return "–" if not isinstance(value, int | float) or isinstance(value, bool) else f"{value:.1f}s"


def templates() -> Jinja2Templates:
    env = Environment(loader=PackageLoader("tackroom_viewer", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters.update(reward=_reward, seconds=_seconds, pretty=pretty)
    return Jinja2Templates(env=env)


def _float(value: str | None) -> tuple[float | None, str | None]:
    if value is None or not value.strip():
        return None, None
    try:
        number = float(value)
    except ValueError:
        return None, f"not a number: {value!r}"
    return (number, None) if math.isfinite(number) else (None, f"not a finite number: {value!r}")


def parse_filter(request: Request) -> tuple[TrialFilter, list[str]]:
    q = request.query_params
    low, low_problem = _float(q.get("reward_min"))
    high, high_problem = _float(q.get("reward_max"))
    problems = [f"reward_min: {low_problem}"] * bool(low_problem) + [f"reward_max: {high_problem}"] * bool(high_problem)
    return TrialFilter(harness=q.get("harness", ""), model=q.get("model", ""), task=q.get("task", ""),
                       error=q.get("error", ""), group=q.get("group", ""), reward_min=low, reward_max=high), problems


@dataclass
class BatchLink:
    """A training step and the batch of trials it trained on."""

    step: dict[str, Any]
    prefix: str | None
    trials: int


class Viewer:
    """The routes over one root folder (a run, or a folder of runs). The handlers are plain functions: Starlette
    runs them in its thread pool, as they read files."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.templates = templates()
        self.tokenizers = Tokenizers()
        for run in find_runs(self.root):  # start loading the runs' tokenizers now: a trial page never waits long
            name = tokenizer_name(run, None)
            if name is not None:
                self.tokenizers.start(name)

    def page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        response = self.templates.TemplateResponse(request, name, {"root": str(self.root), **context},
                                                   status_code=status)
        response.headers.update(SECURITY_HEADERS)
        return response

    def not_found(self, request: Request, what: str) -> Response:
        return self.page(request, "not_found.html.j2", status=404, what=what)

    # -- routes ------------------------------------------------------------------------------
    def index(self, request: Request) -> Response:
        runs = find_runs(self.root)
        if len(runs) == 1 and runs[0].key == "":
            return RedirectResponse("/run/", status_code=307)
        rows = [(run, len(run.trials(self.root))) for run in runs]
        return self.page(request, "index.html.j2", runs=rows)

    def run(self, request: Request) -> Response:
        key = request.path_params["key"].strip("/")
        path = inside(self.root, key)
        run = None if path is None or not path.is_dir() else RunFolder(path, key)
        if run is None:
            return self.not_found(request, f"run {key!r}")
        folders = run.trials(self.root)
        summaries = [f.summary() for f in folders]
        chosen, problems = parse_filter(request)
        shown = [s for s in summaries if chosen.keeps(s)]
        steps = run.steps
        batches = self._batches(run, steps, summaries)
        groups = sorted({s.group for s in summaries if s.group})
        return self.page(
            request, "run.html.j2", run=run, kind=run.kind, config=run.config, summary=run.summary,
            trials=shown, total=len(summaries), filter=chosen, problems=problems,
            facets=_facets(summaries), grid=task_grid(summaries) if summaries else None,
            report=run.matrix_report, steps=steps, curve=reward_curve(steps), batches=batches,
            groups=groups if run.kind == "train" and not steps else [])

    @staticmethod
    def _batches(run: RunFolder, steps: list[dict[str, Any]], summaries: list[TrialSummary]) -> list[BatchLink]:
        links = []
        for s in steps:
            batch = s.get("batch")
            prefix = run.batch_prefix(batch) if isinstance(batch, int) else None
            n = sum(1 for t in summaries if prefix and t.group.startswith(prefix))
            links.append(BatchLink(s, prefix if n else None, n))
        return links

    def trial(self, request: Request) -> Response:
        key = request.path_params["key"].strip("/")
        folder = trial_at(self.root, key)
        if folder is None:
            return self.not_found(request, f"trial {key!r}")
        run = run_of(self.root, folder.path)
        result = folder.result
        page = trial_page(folder.key, result, folder.trajectory, decoder_for(self.tokenizers, run, result))
        return self.page(request, "trial.html.j2", trial=page, run=run, group=folder.group,
                         others=self._same_task(page.result, folder.key))

    def _same_task(self, result: dict[str, Any] | None, key: str) -> list[TrialSummary]:
        """Trials of the same task in every run under the root (for the compare picker)."""
        task = (result or {}).get("task")
        if not isinstance(task, str):
            return []
        return [s for run in find_runs(self.root) for f in run.trials(self.root)
                if f.key != key and (s := f.summary()).task == task]

    def compare(self, request: Request) -> Response:
        sides = []
        for name in ("a", "b"):
            key = request.query_params.get(name, "").strip("/")
            folder = trial_at(self.root, key) if key else None
            if folder is None:
                return self.not_found(request, f"trial {key!r} (compare needs ?a=TRIAL&b=TRIAL)")
            result = folder.result
            sides.append(trial_page(folder.key, result, folder.trajectory,
                                    decoder_for(self.tokenizers, run_of(self.root, folder.path), result)))
        return self.page(request, "compare.html.j2", a=sides[0], b=sides[1])

    def raw(self, request: Request) -> Response:
        """A trial's result.json or trajectory.json as it is on disk (served as JSON, never as a page)."""
        key = request.path_params["key"].strip("/")
        folder, name = key.rpartition("/")[::2]
        trial = trial_at(self.root, folder)
        body = read_regular(trial.path / name) if trial is not None and name in RAW_FILES else None
        if body is None:  # missing, or not a regular file: a link is never followed out of the runs folder
            return self.not_found(request, f"file {key!r}")
        response = Response(body, media_type="application/json")
        response.headers.update({**SECURITY_HEADERS, "Content-Security-Policy": "sandbox; default-src 'none'"})
        return response


def _facets(summaries: list[TrialSummary]) -> dict[str, list[str]]:
    return {
        "harness": sorted({s.harness for s in summaries if s.harness}),
        "model": sorted({s.model for s in summaries if s.model}),
        "task": sorted({s.task for s in summaries if s.task}),
        "error": sorted({s.error_class or "none" for s in summaries}),
    }


def create_app(root: str | Path, *, allowed_hosts: list[str] | None = None) -> Starlette:
    """The viewer over ``root`` (a run folder, or a folder of runs such as ``runs/``).

    ``allowed_hosts``: the Host header values it answers (default: localhost and 127.0.0.1, any port).
    """
    viewer = Viewer(Path(root))
    hosts = allowed_hosts or ["127.0.0.1", "localhost", "::1", "[::1]"]
    return Starlette(
        routes=[
            Route("/", viewer.index),
            Route("/run/{key:path}", viewer.run),
            Route("/trial/{key:path}", viewer.trial),
            Route("/compare", viewer.compare),
            Route("/raw/{key:path}", viewer.raw),
        ],
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)],
    )
