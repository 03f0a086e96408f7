"""The scripted teacher: a Python function's replies served as an engine (token ids) and as chat (text only)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tackroom import ConfigError
from tackroom_gateway import PROBE_USER, ChatTemplate, load_tokenizer
from tackroom_train.collect.teacher import ScriptedTeacher, load_teacher_script, serve_teacher, teacher_for

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate(load_tokenizer("smollm2"))


def client(teacher: ScriptedTeacher) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=teacher.app()), base_url="http://teacher/v1")


async def test_completions_answer_the_scripts_text_in_token_ids_closed_and_cut_at_max_tokens(template):
    seen: list[str] = []
    teacher = ScriptedTeacher(lambda prompt: seen.append(prompt) or "blue sky", template)
    prompt = template.render_ids([{"role": "user", "content": "Say blue."}])
    async with client(teacher) as http:
        whole = (await http.post("/completions", json={"prompt": prompt})).json()["choices"][0]
        cut = (await http.post("/completions", json={"prompt": prompt, "max_tokens": 1})).json()["choices"][0]
    assert seen[0] == template.decode(prompt) and "<|im_start|>user\nSay blue." in seen[0]
    assert whole["token_ids"] == template.encode("blue sky") + [template.end_of_turn_id]
    assert whole["finish_reason"] == "stop" and whole["prompt_token_ids"] == prompt and whole["text"] == "blue sky"
    assert cut["token_ids"] == whole["token_ids"][:1] and cut["finish_reason"] == "length"


async def test_a_liveness_probe_is_answered_without_asking_the_script(template):
    teacher = ScriptedTeacher(lambda prompt: pytest.fail("the script was asked"), template)
    async with client(teacher) as http:
        answer = await http.post("/completions", json={"prompt": [5, 6], "max_tokens": 1, "user": PROBE_USER})
    assert answer.json()["choices"][0]["token_ids"] == [5] and teacher.requests == 0


async def test_chat_answers_text_with_the_tool_calls_parsed(template):
    teacher = ScriptedTeacher(lambda prompt: '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n'
                              '</tool_call>', template)
    async with client(teacher) as http:
        answer = (await http.post("/chat/completions", json={
            "messages": [{"role": "user", "content": "read a"}], "tools": TOOLS})).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and "token_ids" not in choice
    assert choice["message"]["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "a"}'}


@pytest.mark.parametrize(("script", "message"), [(lambda prompt: 1 / 0, "ZeroDivisionError"),
                                                 (lambda prompt: None, "returned NoneType")])
async def test_a_failing_script_is_an_engine_error(template, script, message):
    async with client(ScriptedTeacher(script, template)) as http:
        for path, body in (("/completions", {"prompt": [1]}), ("/chat/completions", {"messages": [
                {"role": "user", "content": "x"}]})):
            answer = await http.post(path, json=body)
            assert answer.status_code == 500 and message in answer.json()["error"]["message"]


async def test_served_on_a_port_it_lists_its_model(template):
    async with serve_teacher(ScriptedTeacher(lambda p: "x", template, model="t1")) as url, httpx.AsyncClient() as http:
        assert (await http.get(f"{url}/models")).json()["data"][0]["id"] == "t1"


def test_a_script_is_a_module_function_or_a_file_function(tmp_path):
    (tmp_path / "t.py").write_text("def reply(prompt):\n    return 'ok'\nvalue = 3\n")
    assert load_teacher_script(f"{tmp_path / 't.py'}:reply")("") == "ok"
    assert load_teacher_script("json:dumps")([1]) == "[1]"
    for ref, message in ((f"{tmp_path / 't.py'}:value", "has no function 'value'"),
                         (f"{tmp_path / 'none.py'}:reply", "no such file"), ("no_such_module_x:reply", "importing"),
                         ("reply", "give module:function"), (f"{tmp_path / 't.py'}:", "give module:function")):
        with pytest.raises(ConfigError, match=message):
            load_teacher_script(ref)
    with pytest.raises(ConfigError, match="teacher tokenizer '/nowhere' cannot be loaded"):
        teacher_for("json:dumps", "/nowhere")


def test_the_module_serves_from_the_command_line_and_refuses_a_bad_script(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "tackroom_train.collect.teacher", "nowhere.py:reply",
                           "--tokenizer", "smollm2"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2 and "error: teacher script 'nowhere.py:reply': no such file" in done.stderr
