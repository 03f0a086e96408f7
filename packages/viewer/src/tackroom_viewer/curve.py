"""A training run's reward curve as SVG geometry (the template draws it; no JavaScript).

Rewards are in [0, 1] (the runtime refuses others), so the y axis is fixed; the x axis spans the steps.
Each point carries the step's batch, so the template links it to the trials that batch rolled out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTH, HEIGHT, PAD = 640, 240, 36


@dataclass
class CurvePoint:
    step: int
    batch: int | None
    reward: float
    x: float
    y: float


@dataclass
class Curve:
    points: list[CurvePoint]
    polyline: str
    x_ticks: list[tuple[float, int]]
    y_ticks: list[tuple[float, str]]
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


def reward_curve(steps: list[dict[str, Any]]) -> Curve | None:
    """The mean reward per step as points on a WIDTH × HEIGHT canvas; None without a readable step."""
    rows = [s for s in steps if isinstance(s.get("step"), int) and isinstance(s.get("mean_reward"), int | float)]
    if not rows:
        return None
    rows.sort(key=lambda s: s["step"])
    first, last = rows[0]["step"], rows[-1]["step"]
    span = max(last - first, 1)

    def x(step: int) -> float:
        return round(PAD + (WIDTH - 2 * PAD) * (step - first) / span, 1)

    def y(reward: float) -> float:
        clamped = min(max(float(reward), 0.0), 1.0)
        return round(HEIGHT - PAD - (HEIGHT - 2 * PAD) * clamped, 1)

    points = [CurvePoint(s["step"], s.get("batch") if isinstance(s.get("batch"), int) else None,
                         float(s["mean_reward"]), x(s["step"]), y(s["mean_reward"])) for s in rows]
    every = max(1, len(rows) // 10)
    x_ticks = [(p.x, p.step) for p in points[::every]]
    y_ticks = [(y(v), f"{v:g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)]
    return Curve(points, " ".join(f"{p.x},{p.y}" for p in points), x_ticks, y_ticks)
