"""The policy's sampling, added to the Responses requests Codex sends without any."""

from __future__ import annotations

import json

from tackroom_codex.sampling import responses_sampling, with_sampling


def test_chat_names_map_to_responses_fields_and_a_default_output_limit():
    assert responses_sampling({"temperature": 0.2, "max_tokens": 64, "seed": 1}, 512) == {
        "temperature": 0.2, "max_output_tokens": 64}
    assert responses_sampling({}, 512) == {"max_output_tokens": 512}


def test_only_missing_fields_are_filled():
    body = json.dumps({"model": "m", "temperature": 1.0, "input": []}).encode()
    out = json.loads(with_sampling(body, {"temperature": 0.0, "max_output_tokens": 64}))
    assert out == {"model": "m", "temperature": 1.0, "input": [], "max_output_tokens": 64}
    assert with_sampling(b"not json", {"temperature": 0.0}) == b"not json"
