"""Behaviour metrics of one episode, as the trial result reports them."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, Field


class EpisodeStats(BaseModel):
    """Counters the loop updates; :meth:`metrics` flattens them for ``Trajectory.metrics``."""

    turns: int = 0
    completion_tokens: int = 0
    tool_calls: Counter = Field(default_factory=Counter)
    tool_successes: Counter = Field(default_factory=Counter)
    tool_errors: Counter = Field(default_factory=Counter)
    """By kind: tool_error, empty, timeout, mcp_error, unknown_tool, bad_arguments."""
    nudges: int = 0
    truncations: int = 0
    parse_failures: int = 0
    parse_repairs: int = 0
    reconnects: int = 0
    images: int = 0
    summaries: int = 0
    refusals: int = 0
    """final_answer (or a plain answer) refused while toolbelt todos were open."""
    toolbelt_added: int = 0
    todos_open: int = 0
    tool_time_s: float = 0.0
    model_time_s: float = 0.0

    def metrics(self, code_tools: tuple[str, ...]) -> dict[str, float]:
        calls = sum(self.tool_calls.values())
        ok = sum(self.tool_successes.values())
        code = sum(n for name, n in self.tool_calls.items() if name.startswith(code_tools))
        out: dict[str, float] = {
            "turns": float(self.turns),
            "completion_tokens": float(self.completion_tokens),
            "assistant_tokens_per_turn": self.completion_tokens / self.turns if self.turns else 0.0,
            "tool_calls": float(calls),
            "tool_call_success_rate": ok / calls if calls else 0.0,
            "code_execution_share": code / calls if calls else 0.0,
            "nudges": float(self.nudges),
            "truncations": float(self.truncations),
            "parse_failures": float(self.parse_failures),
            "parse_repairs": float(self.parse_repairs),
            "mcp_reconnects": float(self.reconnects),
            "images": float(self.images),
            "summaries": float(self.summaries),
            "final_answer_refusals": float(self.refusals),
            "toolbelt_added": float(self.toolbelt_added),
            "todos_open": float(self.todos_open),
            "tool_time_s": round(self.tool_time_s, 4),
            "model_time_s": round(self.model_time_s, 4),
        }
        for name, n in self.tool_calls.items():
            out[f"tool_calls/{name}"] = float(n)
            out[f"tool_success_rate/{name}"] = self.tool_successes[name] / n
        for kind, n in self.tool_errors.items():
            out[f"tool_errors/{kind}"] = float(n)
        return out
