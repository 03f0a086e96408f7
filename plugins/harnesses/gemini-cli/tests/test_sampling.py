"""The policy's sampling, filled into the Gemini requests the CLI sends without it (no output limit meant a small
model wrote until its context was full: four of twelve trials in the agents matrix timed out in their first call)."""

from __future__ import annotations

from tackroom_gemini_cli.sampling import fill_generation, generation_config


def test_chat_names_map_to_generation_config_and_a_default_output_limit():
    assert generation_config({"temperature": 0.7, "max_tokens": 256, "stop": "END", "logprobs": True}, 512) == {
        "temperature": 0.7, "maxOutputTokens": 256, "stopSequences": ["END"]}
    assert generation_config({}, 512) == {"maxOutputTokens": 512}


def test_only_missing_fields_of_generate_calls_are_filled():
    fill = fill_generation({"temperature": 0.7, "maxOutputTokens": 256})
    asked = {"contents": [], "generationConfig": {"temperature": 0.0}}
    assert fill("sessions/s/t/v1beta/models/m:streamGenerateContent", asked) == {
        "contents": [], "generationConfig": {"temperature": 0.0, "maxOutputTokens": 256}}
    assert fill("v1beta/models/m:generateContent", {"contents": []})["generationConfig"] == {
        "temperature": 0.7, "maxOutputTokens": 256}
    assert fill("v1beta/models/m:countTokens", asked) == asked
