"""The policy's sampling, added to the Responses requests Codex sends without any."""

from __future__ import annotations

from tackroom_codex.sampling import fill_responses, responses_sampling


def test_chat_names_map_to_responses_fields_and_a_default_output_limit():
    assert responses_sampling({"temperature": 0.2, "max_tokens": 64, "seed": 1}, 512) == {
        "temperature": 0.2, "max_output_tokens": 64}
    assert responses_sampling({}, 512) == {"max_output_tokens": 512}


def test_only_missing_fields_of_responses_requests_are_filled():
    fill = fill_responses({"temperature": 0.0, "max_output_tokens": 64})
    doc = {"model": "m", "temperature": 1.0, "input": []}
    assert fill("v1/responses", doc) == {"model": "m", "temperature": 1.0, "input": [], "max_output_tokens": 64}
    assert fill("v1/models", doc) == doc
