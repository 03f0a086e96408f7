"""Secrets never reach disk (issue 18, item 8).

Marker keys are planted in every place tackroom takes a credential from — inline
config keys (``[policy] api_key``, a matrix model's ``api_key``, the rubric judge's
``api_keys``), keys named by ``api_key_env`` variables, and URL userinfo
(``http://user:pass@host``) — in real ``tackroom run``, ``tackroom matrix`` and
``tackroom train --dry-run`` runs. The endpoints the runs talk to are hostile: the
model server answers 401 *echoing back* the credential it was sent (as some
providers do), the judge writes the key it was sent into its rationale. Then every
file written under the run folder, and everything printed, is searched for the
markers (also base64-encoded, as HTTP Basic auth carries userinfo).

The keys must still be *sent*: each test checks that the endpoint received them, so
a run that simply dropped the credentials could not pass.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import pickle
import re
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from tackroom._config import RunConfig
from tackroom._endpoint import Endpoint
from tackroom._policy import Policy, redact, redact_url
from tackroom.testing import RequestForTests, ResponseForTests, ScriptedChatServerForTests, ScriptedReply
from tackroom_rubric_judge.testing import MisbehavingJudgeServerForTests

USER = "trk-user-4d1c"
RUN_INLINE = "trk-secret-run-inline-7f3a91c2"
RUN_ENV = "trk-secret-run-env-5b2c44e8"
RUN_URLPW = "trk-secret-run-urlpw-9d1e0a77"
JUDGE_INLINE = "trk-secret-judge-inline-31ab7c"
JUDGE_ENV = "trk-secret-judge-env-c0ffee11"
MATRIX_INLINE = "trk-secret-matrix-inline-a5a5a5"
MATRIX_ENV = "trk-secret-matrix-env-b6b6b6b6"
MATRIX_URLPW = "trk-secret-matrix-urlpw-c7c7c7"
MATRIX_JUDGE_INLINE = "trk-secret-mjudge-inline-d8d8d8"
MATRIX_JUDGE_ENV = "trk-secret-mjudge-env-e9e9e9e9"
MATRIX_JUDGE_URLPW = "trk-secret-mjudge-urlpw-f0f0f0"
TRAIN_INLINE = "trk-secret-train-inline-1a2b3c"
TRAIN_URLPW = "trk-secret-train-urlpw-4d5e6f"
TRAIN_OVERRIDE = "trk-secret-train-override-778899"


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


ALL_MARKERS = [RUN_INLINE, RUN_ENV, RUN_URLPW, JUDGE_INLINE, JUDGE_ENV, MATRIX_INLINE, MATRIX_ENV, MATRIX_URLPW,
               MATRIX_JUDGE_INLINE, MATRIX_JUDGE_ENV, MATRIX_JUDGE_URLPW, TRAIN_INLINE, TRAIN_URLPW, TRAIN_OVERRIDE,
               basic(USER, RUN_URLPW), basic(USER, MATRIX_URLPW), basic(USER, MATRIX_JUDGE_URLPW), f"{USER}:"]


def assert_no_marker(root: Path, *printed: str) -> list[Path]:
    """Every file under ``root`` (and everything printed) is free of every marker; returns the files searched."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files, f"nothing was written under {root}: the search would prove nothing"
    leaks = []
    for path in files:
        data = path.read_bytes()
        leaks += [f"{path.relative_to(root)}: {m}" for m in ALL_MARKERS if m.encode() in data]
    for i, text in enumerate(printed):
        leaks += [f"printed output #{i}: {m}" for m in ALL_MARKERS if m in text]
    assert not leaks, "credentials reached disk or the terminal:\n" + "\n".join(leaks)
    return files


class KeyEchoingModelServer(ScriptedChatServerForTests):
    """A hostile model endpoint: serves /models, and answers every chat request with HTTP 401 echoing back the
    ``Authorization`` header it received (some providers quote the rejected key in their error body)."""

    def __init__(self) -> None:
        super().__init__(["unused"])
        self.auth: list[str] = []

    async def _chat(self, request: RequestForTests) -> ResponseForTests:
        auth = request.headers.get("authorization", "")
        self.auth.append(auth)
        return ResponseForTests.json({"error": {"message": f"Incorrect API key provided: {auth}",
                                                "type": "invalid_request_error", "code": "invalid_api_key"}}, 401)


class KeyEchoingJudge(MisbehavingJudgeServerForTests):
    """A hostile judge: its verdict's rationale quotes the credential it was sent."""

    async def _respond(self, behaviour, body):
        with self._lock:
            key = self.requests[-1].api_key if self.requests else None
        return self._completion(body, json.dumps({"rationale": f"you sent me {key}", "passed": True}))


def write_rubric_task(root: Path, name: str = "rubric-task") -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "instruction.md").write_text("Say hello.\n")
    (d / "task.toml").write_text(
        '[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n'
        '[[rubric]]\nid = "one"\ncriterion = "The agent says hello."\n'
        '[[rubric]]\nid = "two"\ncriterion = "The agent is polite."\n')
    (d / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho hello\n")
    return d


async def tackroom(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real CLI in a subprocess, without blocking this loop (the scripted servers live in it)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tackroom_app", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "COLUMNS": "200", **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode or 0, out.decode(), err.decode()


def results(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(run_dir.glob("*/result.json"))]


# -- the types ---------------------------------------------------------------------------------------------
def test_credential_fields_are_secret_and_the_policy_handle_never_dumps_its_key():
    assert isinstance(Endpoint(api_key=RUN_INLINE).api_key, SecretStr)
    assert isinstance(Endpoint(base_url="http://x/v1", api_key=MATRIX_INLINE).api_key, SecretStr)
    from tackroom_rubric_judge.verifier import RubricJudgeOptions

    assert all(isinstance(k, SecretStr) for k in RubricJudgeOptions(api_keys=[JUDGE_INLINE]).api_keys)
    policy = Policy(base_url="http://127.0.0.1:1/v1", model="m", api_key=SecretStr(RUN_INLINE))
    assert policy.api_key == RUN_INLINE, "revealed for the harness to send"
    for text in (repr(policy), str(policy), policy.model_dump_json(), json.dumps(policy.model_dump())):
        assert RUN_INLINE not in text
    assert pickle.loads(pickle.dumps(policy)).api_key == RUN_INLINE, "the ray executor still ships it"
    config = RunConfig(policy=Endpoint(api_key=RUN_INLINE))
    assert RUN_INLINE not in config.model_dump_json() and RUN_INLINE not in repr(config)
    assert config.policy.resolved_api_key() == RUN_INLINE


@pytest.mark.parametrize("url,shown", [
    ("http://user:pass@host:8000/v1", "http://***@host:8000/v1"),
    ("https://tok@api.example.com/v1", "https://***@api.example.com/v1"),
    ("http://u:p%40ss@h/v1", "http://***@h/v1"),
    ("http://u:p@ss@h/v1?x=1", "http://***@h/v1?x=1"),
    ("http://127.0.0.1:8011/v1", "http://127.0.0.1:8011/v1"),
    ("see http://a:b@h1/x and https://c:d@h2/y", "see http://***@h1/x and https://***@h2/y"),
])
def test_url_userinfo_is_redacted(url, shown):
    assert redact_url(url) == shown


def test_redact_masks_secret_fields_and_registered_values_but_keeps_the_rest():
    Endpoint(api_key=RUN_INLINE)  # a config holding it registers it
    data = {"api_key": "sk-whatever-1234", "api_keys": ["a" * 10], "hf_token": "hf_abcdefgh", "max_tokens": 16,
            "tokenizer": "smollm2", "token_ids": True, "api_key_env": "MY_KEY_VAR",
            "message": f"HTTP 401: Incorrect API key provided: {RUN_INLINE}", "url": "http://u:p@h/v1"}
    assert redact(data) == {"api_key": "***", "api_keys": ["***"], "hf_token": "***", "max_tokens": 16,
                            "tokenizer": "smollm2", "token_ids": True, "api_key_env": "MY_KEY_VAR",
                            "message": "HTTP 401: Incorrect API key provided: ***", "url": "http://***@h/v1"}


def test_the_trainers_generator_sends_the_revealed_key():
    from tackroom_train.config import TrainConfig
    from tackroom_train.generator import TackroomGenerator

    config = TrainConfig.model_validate({"tasks": ["x"], "harness": {"name": "answer"}, "sandbox": {"name": "local"},
                                         "policy": {"api_key": TRAIN_INLINE}, "model": {"path": "smollm2"}})
    generator = TackroomGenerator(config, base_url="http://127.0.0.1:1/v1")
    (plugins,) = generator._plugins({}).values()  # one harness: one label's trial plugins
    assert plugins.policy.api_key == TRAIN_INLINE, "never the masked '**********'"
    assert config.model_copy(deep=True).policy.resolved_api_key() == TRAIN_INLINE  # what launch() ships to Ray


# -- tackroom run --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["inline", "env", "userinfo"])
async def test_tackroom_run_never_writes_the_policy_key(tmp_path, where):
    task = write_rubric_task(tmp_path / "tasks")
    async with KeyEchoingModelServer() as server:
        url, key_line, env = server.base_url, "", {}
        if where == "inline":
            key_line = f'api_key = "{RUN_INLINE}"\n'
        elif where == "env":
            key_line, env = 'api_key_env = "TRK_TEST_POLICY_KEY"\n', {"TRK_TEST_POLICY_KEY": RUN_ENV}
        else:
            url = url.replace("http://", f"http://{USER}:{RUN_URLPW}@")
        cfg = tmp_path / "run.toml"
        cfg.write_text(f'tasks = ["{task}"]\n[harness]\nname = "answer"\nattempts = 1\n'
                       f'[policy]\nbase_url = "{url}"\nmodel = "scripted"\ngateway = false\n{key_line}'
                       f'[runtime]\nattempts = 1\nout = "{tmp_path / "runs"}"\nrun_id = "r"\n')
        code, out, err = await tackroom("run", "--config", str(cfg), "--json", env=env)
        code2, out2, err2 = await tackroom("run", "--config", str(cfg), env=env)  # the table, and a resume
    assert code == 0 and code2 == 0, err + err2
    if where == "inline":
        assert server.auth[0] == f"Bearer {RUN_INLINE}", "the key was sent"
    elif where == "env":
        assert server.auth[0] == f"Bearer {RUN_ENV}", "the key from the environment was sent"
    else:
        assert server.auth, "the endpoint was called"
    (result,) = results(tmp_path / "runs" / "r")
    assert result["error"]["type"] == "AnswerEndpointError" and "HTTP 401" in result["error"]["message"]
    # the endpoint echoed the credential back; what was written has it masked
    assert re.search(r"Incorrect API key provided: (Bearer|Basic) \*\*\*;", result["error"]["message"]), result
    if where == "userinfo":
        assert "http://***@127.0.0.1" in result["error"]["message"]
        assert json.loads((tmp_path / "runs" / "r" / "run.json").read_text())["policy"]["base_url"].startswith(
            "http://***@127.0.0.1")
    files = assert_no_marker(tmp_path / "runs", out, err, out2, err2)
    assert {p.name for p in files} >= {"run.json", "result.json", "trajectory.json"}


async def test_a_key_echoed_in_a_model_error_stays_off_disk(tmp_path):
    # HTTP 400 is the model's own failure: the harness keeps the endpoint's message in the trajectory's notes
    task = write_rubric_task(tmp_path / "tasks")
    echo = ScriptedReply(status=400, error_message=f"model 'scripted' is not available for key {RUN_INLINE}")
    async with ScriptedChatServerForTests([echo]) as server:
        cfg = tmp_path / "run.toml"
        cfg.write_text(f'tasks = ["{task}"]\n[harness]\nname = "answer"\n'
                       f'[policy]\nbase_url = "{server.base_url}"\nmodel = "scripted"\ngateway = false\n'
                       f'api_key = "{RUN_INLINE}"\n[runtime]\nattempts = 1\nout = "{tmp_path / "runs"}"\n')
        code, out, err = await tackroom("run", "--config", str(cfg), "--json")
        asked = len(server.requests)
    assert code == 0 and asked == 1, err
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    (result,) = results(run_dir)
    assert result["error"]["class"] == "model" and "for key ***" in result["error"]["message"], result["error"]
    files = assert_no_marker(tmp_path / "runs", out, err)
    assert "trajectory.json" in {p.name for p in files}


async def test_tackroom_run_never_writes_the_judges_keys(tmp_path):
    task = write_rubric_task(tmp_path / "tasks")
    with KeyEchoingJudge() as judge:
        cfg = tmp_path / "run.toml"
        cfg.write_text(f'tasks = ["{task}"]\n[harness]\nname = "oracle"\n'
                       f'[verifier]\nname = "rubric-judge"\nbase_url = "{judge.base_url}"\nmodel = "judge"\n'
                       f'api_keys = ["{JUDGE_INLINE}"]\napi_key_env = ["TRK_TEST_JUDGE_KEYS"]\n'
                       f'[runtime]\nattempts = 1\nout = "{tmp_path / "runs"}"\n')
        code, out, err = await tackroom("run", "--config", str(cfg), "--json",
                                        env={"TRK_TEST_JUDGE_KEYS": JUDGE_ENV})
        keys_seen = set(judge.keys_seen)
    assert code == 0, err
    assert keys_seen == {JUDGE_INLINE, JUDGE_ENV}, "both keys were sent, round-robin"
    (run_dir,) = [d for d in (tmp_path / "runs").iterdir() if d.is_dir()]
    (result,) = results(run_dir)
    assert result["error"] is None and result["reward"] == 1.0, result["error"]
    rationales = [c["rationale"] for c in result["reward_details"]["criteria"]]
    assert rationales and all(r == "you sent me ***" for r in rationales), rationales
    assert json.loads((run_dir / "run.json").read_text())["verifier"]["api_keys"] == ["***"]
    assert_no_marker(tmp_path / "runs", out, err)


# -- tackroom matrix ------------------------------------------------------------------------------------------
async def test_tackroom_matrix_never_writes_a_key(tmp_path):
    task = write_rubric_task(tmp_path / "tasks")
    env = {"TRK_TEST_MODEL_KEY": MATRIX_ENV, "TRK_TEST_MJUDGE_KEYS": MATRIX_JUDGE_ENV}
    with KeyEchoingJudge() as judge:
        async with KeyEchoingModelServer() as server:
            judge_url = judge.base_url.replace("http://", f"http://{USER}:{MATRIX_JUDGE_URLPW}@")
            userinfo_url = server.base_url.replace("http://", f"http://{USER}:{MATRIX_URLPW}@")
            cfg = tmp_path / "m.toml"
            cfg.write_text(
                f'tasks = ["{task}"]\n'
                f'[verifier]\nname = "rubric-judge"\nbase_url = "{judge_url}"\nmodel = "judge"\n'
                f'api_keys = ["{MATRIX_JUDGE_INLINE}"]\napi_key_env = ["TRK_TEST_MJUDGE_KEYS"]\n'
                f'[[models]]\nlabel = "inline"\nbase_url = "{server.base_url}"\napi_key = "{MATRIX_INLINE}"\ngateway = false\n'
                f'[[models]]\nlabel = "env"\nbase_url = "{server.base_url}"\napi_key_env = "TRK_TEST_MODEL_KEY"\n'
                f'gateway = false\n'
                f'[[models]]\nbase_url = "{userinfo_url}"\ngateway = false\n'
                f'[[harnesses]]\nname = "answer"\noptions = {{ attempts = 1 }}\n'
                f'[[harnesses]]\nname = "oracle"\n[[harnesses]]\nname = "nop"\n'
                f'[runtime]\nattempts = 1\nout = "{tmp_path / "runs"}"\n')
            code, out, err = await tackroom("matrix", str(cfg), env=env)
            sent = list(server.auth)
            code2, out2, err2 = await tackroom("matrix", str(cfg), "--json", env=env)  # resume + matrix.json
        judged = set(judge.keys_seen)
    assert code == 0 and code2 == 0, err + err2
    assert f"Bearer {MATRIX_INLINE}" in sent and f"Bearer {MATRIX_ENV}" in sent, sent
    assert len(sent) == 3, "one answer trial per model"
    assert judged, "the judge graded the reference rows"
    run_dir = tmp_path / "runs" / "matrix-m"
    report = json.loads((run_dir / "matrix.json").read_text())
    endpoints = {m["label"]: m["endpoint"] for m in report["models"]}
    assert endpoints["127.0.0.1:" + userinfo_url.rsplit(":", 1)[1].split("/")[0]].startswith("http://***@127.0.0.1"), \
        endpoints
    saved = json.loads((run_dir / "matrix.config.json").read_text())
    assert saved["config"]["verifier"]["api_keys"] == ["***"] and saved["config"]["models"][0]["api_key"] == "***"
    files = assert_no_marker(tmp_path / "runs", out, err, out2, err2)
    assert {p.name for p in files} >= {"matrix.json", "matrix.csv", "report.html", "matrix.config.json",
                                       "result.json", "trajectory.json"}


# -- tackroom train --------------------------------------------------------------------------------------------
async def test_tackroom_train_dry_run_never_writes_or_prints_a_key(tmp_path):
    task = write_rubric_task(tmp_path / "tasks")
    cfg = tmp_path / "train.toml"
    cfg.write_text(
        f'tasks = ["{task}"]\nbackend = "skyrl"\n[harness]\nname = "answer"\n[sandbox]\nname = "local"\n'
        f'[model]\npath = "smollm2"\n'
        f'[policy]\nbase_url = "http://{USER}:{TRAIN_URLPW}@127.0.0.1:1/v1"\napi_key = "{TRAIN_INLINE}"\n'
        f'[rollout]\nout = "{tmp_path / "runs"}"\n'
        f'[skyrl]\n"generator.inference_engine.api_key" = "{TRAIN_OVERRIDE}"\n')
    code, out, err = await tackroom("train", str(cfg), "--dry-run", "--run-id", "t")
    code2, out2, err2 = await tackroom("train", str(cfg), "--dry-run", "--json", "--run-id", "t2")
    assert code == 0 and code2 == 0, err + err2
    assert json.loads(out2)["overrides"]["generator.inference_engine.api_key"] == "***"
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir()), "a dry run keeps no run folder"
    # what a run writes before it trains (the prompts, the mapped config), kept in a folder here to be searched
    from rich.console import Console

    from tackroom_train.backends import Output
    from tackroom_train.cli import _plan_and_run
    from tackroom_train.config import load_train_config

    kept = tmp_path / "runs" / "t"
    kept.mkdir(parents=True)
    assert _plan_and_run(load_train_config(cfg), cfg, Output(Console(file=io.StringIO()), Console(file=io.StringIO())),
                         kept, dry_run=True, as_json=False, preflight_only=False) == 0
    assert_no_marker(tmp_path / "runs", out, err, out2, err2)
