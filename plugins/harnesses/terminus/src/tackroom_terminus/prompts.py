"""What Terminus says to the model: the protocol, the task, observations, parse errors, the completion check."""

from __future__ import annotations

SYSTEM = """\
You operate a Linux terminal (bash inside tmux) to complete a task. Each turn you see the terminal and \
answer with exactly one JSON object and nothing else:
{{"analysis": "what the terminal shows", "plan": "what you do next", "commands": [{{"keystrokes": "ls -la\\n", "duration": 0.5}}], "task_complete": false}}
Rules:
- keystrokes are typed exactly as written; end a command with \\n to run it. A lone tmux key name (C-c, C-d, Escape, Enter, Tab, Up) presses that key.
- duration is how many seconds to wait after typing (at most {max_duration:g}); short for quick commands, longer for slow ones. Use "commands": [] to just wait and look again.
- Do not open interactive editors; write files with shell commands (printf, echo, cat <<'EOF').
- Set "task_complete": true only when the task is done; you will be asked to confirm once."""

TASK = """\
Task:
{instruction}

{observation}"""

PARSE_ERROR = """\
Your last answer could not be used:
{errors}
Answer again with one JSON object: {{"analysis": "...", "plan": "...", "commands": [{{"keystrokes": "...", "duration": 1.0}}], "task_complete": false}}"""

TRUNCATED = "Your answer was cut off at the per-turn token limit: keep analysis and plan short."

WARNINGS = "Notes on your last answer: {warnings}"

CONFIRM = """\
{observation}

You marked the task complete. Are you sure? Your work is then graded and cannot be changed. \
If it is done, answer again with "task_complete": true; otherwise continue with more commands and "task_complete": false."""


def system_prompt(max_duration: float) -> str:
    return SYSTEM.format(max_duration=max_duration)


def parse_error(errors: list[str], truncated: bool) -> str:
    listed = [*(["- " + TRUNCATED] if truncated else []), *("- " + e for e in errors)]
    return PARSE_ERROR.format(errors="\n".join(listed))


def with_warnings(text: str, warnings: list[str]) -> str:
    return f"{WARNINGS.format(warnings='; '.join(warnings))}\n\n{text}" if warnings else text
