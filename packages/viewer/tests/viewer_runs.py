"""Run folders made by the viewer's tests with tackroom's own writers: two `tackroom run`s of the answer harness behind the
real policy gateway (so trials carry token ids, loss masks and logprobs), whose model says hostile markup, and a
training run's folder (steps written as the Tinker loop writes them, its batch's trials made by a real run)."""

from __future__ import annotations

import json
from pathlib import Path

from tackroom.testing import write_task
from tackroom_app import RunConfig, run_config

HOSTILE = ('blue <script>document.title = "pwned"; window.__pwned = 1</script>'
           '<img src=x onerror="window.__pwned = 2"></pre><b id="injected">bold</b>')
"""What the model answers in the first run: markup that must show as text and never run."""

TEST_SH = """#!/bin/bash
# the answer as the grader saw it, in the verifier's output (hostile text goes there too)
cat /app/answer.txt
answer=$(tr -d '[:punct:]' < /app/answer.txt 2>/dev/null | tr '[:upper:]' '[:lower:]' | xargs)
if [ "$answer" = "{word}" ]; then r=1
elif grep -qiw "{word}" /app/answer.txt 2>/dev/null; then r=0.5
else r=0; fi
echo $r > /logs/verifier/reward.txt
"""


def make_tasks(root: Path) -> list[Path]:
    return [write_task(root, f"say-{word}", instruction=f"Say {word}.", test_sh=TEST_SH.format(word=word),
                       agent_timeout_sec=60) for word in ("blue", "red")]


async def answer_run(tasks: list[Path], out: Path, run_id: str, reply: str, tokenizer) -> Path:
    """A real `tackroom run` of the answer harness; the model is a token-level engine double saying ``reply``."""
    from tackroom_gateway.testing import EngineReply, MisbehavingEngine

    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    async with MisbehavingEngine(then=EngineReply.ok(reply), model="smollm2",
                                 encode=lambda text: tokenizer.encode(text, add_special_tokens=False) + [eot]) as engine:
        config = RunConfig.model_validate({
            "tasks": [str(t) for t in tasks], "harness": {"name": "answer"},
            "policy": {"base_url": engine.base_url, "model": "smollm2", "tokenizer": "smollm2", "label": run_id},
            "runtime": {"out": str(out), "attempts": 1, "concurrency": 2},
        })
        run_dir, results, _ = await run_config(config, progress=False, run_id=run_id)
    assert len(results) == len(tasks) and all(r.error is None for r in results), [r.error for r in results]
    return run_dir


async def matrix_run(tasks: list[Path], out: Path, run_id: str, replies: dict[str, str], tokenizer) -> Path:
    """A real `tackroom matrix` (answer harness × one model column per reply) with its reports written."""
    import contextlib

    from tackroom_gateway.testing import EngineReply, MisbehavingEngine
    from tackroom_matrix import build_report, parse_matrix_config, run_matrix, write_reports

    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    async with contextlib.AsyncExitStack() as stack:
        models = []
        for label, reply in replies.items():
            engine = await stack.enter_async_context(MisbehavingEngine(
                then=EngineReply.ok(reply), model="smollm2",
                encode=lambda text: tokenizer.encode(text, add_special_tokens=False) + [eot]))
            models.append({"label": label, "base_url": engine.base_url, "model": "smollm2", "tokenizer": "smollm2"})
        config = parse_matrix_config({
            "title": run_id, "tasks": [str(t) for t in tasks], "passes": 1, "models": models,
            "harnesses": [{"name": "answer"}], "runtime": {"out": str(out), "run_id": run_id, "concurrency": 2,
                                                           "attempts": 1}})
        outcome = await run_matrix(config, progress=False)
    write_reports(build_report(outcome), outcome.run_dir)
    return outcome.run_dir


def write_steps(train_dir: Path, rewards: list[float]) -> None:
    """steps.jsonl and trajectories.jsonl as the Tinker loop's RunLog writes them (its own record models)."""
    from tackroom_train.tinker.records import StepRecord, TrajectoryRecord

    with (train_dir / "steps.jsonl").open("w") as f:
        for step, reward in enumerate(rewards, start=1):
            f.write(json.dumps(StepRecord(step=step, batch=step, version=step - 1, staleness=0, mean_reward=reward,
                                          trained_trials=2, masked_trials=0).row()) + "\n")
        f.write('{"step": 99, "mean_rew')  # a line still being appended: skipped, never an error
    with (train_dir / "trajectories.jsonl").open("w") as f:
        for step in range(1, len(rewards) + 1):
            f.write(json.dumps(TrajectoryRecord(batch=step, step=step, version=step - 1, staleness=0, task_id="say-blue",
                                                repetition=0, reward=rewards[step - 1], masked=False, trained=True,
                                                dropped=False).model_dump()) + "\n")
