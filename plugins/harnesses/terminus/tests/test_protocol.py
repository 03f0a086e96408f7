"""Parsing the model's JSON turns: forgiving where the intent is clear, strict where it is not."""

import json

from tackroom_terminus.protocol import parse_reply, reply_schema, response_format


def parse(text, cap=60.0):
    return parse_reply(text, max_duration=cap)


def test_a_plain_valid_turn():
    result = parse(json.dumps({"analysis": "empty", "plan": "look", "task_complete": False,
                               "commands": [{"keystrokes": "ls -la\n", "duration": 0.5}, {"keystrokes": "C-c", "duration": 0}]}))
    assert result.ok and not result.warnings
    assert [(c.keystrokes, c.duration) for c in result.reply.commands] == [("ls -la\n", 0.5), ("C-c", 0.0)]
    assert result.reply.analysis == "empty" and result.reply.task_complete is False


def test_fences_and_surrounding_text_are_tolerated_with_a_warning():
    text = 'Sure! Here it is:\n```json\n{"analysis": "a", "plan": "p", "commands": [], "task_complete": true}\n```\nDone.'
    result = parse(text)
    assert result.ok and result.reply.task_complete is True
    text = 'thinking... {"analysis": "a", "plan": "p", "commands": []} and more'
    result = parse(text)
    assert result.ok
    assert any("before the JSON" in w for w in result.warnings) and any("after the JSON" in w for w in result.warnings)


def test_lenient_fixes_are_reported():
    result = parse(json.dumps({"commands": [{"keystrokes": "make\n"}, {"keystrokes": "x", "duration": 900, "why": 1}],
                               "task_complete": "false"}), cap=60)
    assert result.ok
    assert [c.duration for c in result.reply.commands] == [1.0, 60.0]
    joined = " | ".join(result.warnings)
    for fragment in ("missing field 'analysis'", "no duration", "above the 60s cap", "unknown fields ['why']",
                     "JSON boolean"):
        assert fragment in joined, joined


def test_errors_the_model_is_shown():
    cases = {
        "": "no JSON object",
        "I'll do it": "no JSON object",
        '{"analysis": "cut off': "invalid JSON",
        "[1, 2]": "no JSON object",
        '"just a string"': "no JSON object",
        json.dumps({"analysis": "", "plan": ""}): "missing field 'commands'",
        json.dumps({"commands": "ls"}): "'commands' must be a list",
        json.dumps({"commands": ["ls"]}): "commands[0] must be an object",
        json.dumps({"commands": [{"keystrokes": 5}]}): "commands[0].keystrokes must be a string",
        json.dumps({"commands": [{"keystrokes": "ls", "duration": "soon"}]}): "commands[0].duration must be a number",
        json.dumps({"commands": [], "task_complete": "maybe"}): "task_complete must be true or false",
    }
    for text, expected in cases.items():
        result = parse(text)
        assert not result.ok and result.reply is None, text
        assert any(expected in e for e in result.errors), (text, result.errors)


def test_completion_needs_no_commands_and_a_list_inside_an_object_is_found():
    assert parse('{"task_complete": true}').reply.commands == []
    result = parse('[{"analysis": "x", "commands": []}]')
    assert result.ok, "an object inside a list is still the first object"


def test_the_schema_bounds_what_a_small_model_can_write():
    schema = reply_schema(max_duration=5, max_chars=60, max_commands=2)
    props = schema["properties"]
    assert schema["required"] == ["analysis", "plan", "commands", "task_complete"]
    assert props["analysis"]["maxLength"] == 60 and props["commands"]["maxItems"] == 2
    assert props["commands"]["items"]["properties"]["duration"]["maximum"] == 5
    assert "maxLength" not in reply_schema(max_duration=5)["properties"]["plan"]
    fmt = response_format(schema)
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] is schema and fmt["json_schema"]["strict"]
