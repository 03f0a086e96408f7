"""Requests the service refuses: malformed JSON (400), an oversized body (413), unknown or wrong fields (422, with
the fields that exist), no valid token (401), an unknown plugin or a config that cannot run (422). Each writes
nothing: the tables' row counts are the same after it."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_testing import OTHER_TOKEN, TOKEN, row_counts, run_config, served

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def service_http(tmp_path, manager, tasks):
    async with served(tmp_path / "svc", manager, max_body_bytes=1 << 20) as (service, client):
        await client.create_batch(run_config(tasks, harness={"name": "nop"}))  # something to leave untouched
        async with httpx.AsyncClient(base_url=client.base_url, timeout=30) as http:
            yield service, http


async def refused(service, http, status: int, method: str, path: str, **kwargs) -> dict:
    before = row_counts(service.engine)
    response = await http.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    assert row_counts(service.engine) == before, f"{method} {path} answered {status} but wrote rows"
    return response.json()["error"]


async def test_malformed_json_is_400(service_http, tasks):
    service, http = service_http
    error = await refused(service, http, 400, "POST", "/v1/batches", content=b'{"config": {"tasks": [',
                          headers={**AUTH, "Content-Type": "application/json"})
    assert error["code"] == "malformed_json"
    error = await refused(service, http, 400, "POST", "/v1/batches", json=["not", "an", "object"], headers=AUTH)
    assert "JSON object" in error["message"]


async def test_a_body_over_the_limit_is_413_declared_or_streamed(service_http, tasks):
    service, http = service_http
    big = {"config": run_config(tasks), "metadata": {"padding": "x" * (1 << 20)}}
    error = await refused(service, http, 413, "POST", "/v1/batches", json=big, headers=AUTH)
    assert error["code"] == "body_too_large"

    async def chunks():  # no Content-Length: the limit is kept while the body streams in
        for _ in range(40):
            yield b"x" * 32768

    error = await refused(service, http, 413, "POST", "/v1/batches", content=chunks(), headers=AUTH)
    assert error["code"] == "body_too_large"


async def test_unknown_fields_are_422_listing_the_valid_ones(service_http, tasks):
    service, http = service_http
    body = {"config": run_config(tasks), "sample": 2}
    error = await refused(service, http, 422, "POST", "/v1/batches", json=body, headers=AUTH)
    assert error["code"] == "invalid_body"
    [problem] = error["errors"]
    assert problem["path"] == "sample" and problem["message"] == "unknown field"
    assert problem["valid_fields"] == ["config", "metadata", "policy_version", "samples"]
    assert "valid fields: config, metadata, policy_version, samples" in error["message"]

    nested = {"config": {**run_config(tasks), "harnes": {"name": "nop"}, "runtime": {"concurency": 2}}}
    error = await refused(service, http, 422, "POST", "/v1/batches", json=nested, headers=AUTH)
    paths = {p["path"]: p["valid_fields"] for p in error["errors"]}
    assert "harness" in paths["config.harnes"] and "sandbox" in paths["config.harnes"]
    assert "concurrency" in error["message"]
    error = await refused(service, http, 422, "GET", "/v1/batches", params={"limt": "5"}, headers=AUTH)
    assert error["errors"][0]["valid_fields"] == ["before", "limit", "state"]
    error = await refused(service, http, 422, "POST", "/v1/batches", json={"config": run_config(tasks),
                                                                          "samples": 0}, headers=AUTH)
    assert error["errors"][0]["path"] == "samples"


async def test_a_config_that_cannot_run_is_422_naming_what_exists(service_http, tasks, tmp_path):
    service, http = service_http
    error = await refused(service, http, 422, "POST", "/v1/batches", headers=AUTH,
                          json={"config": run_config(tasks, harness={"name": "orcale"})})
    assert error["code"] == "invalid_config" and "orcale" in error["message"] and "oracle" in error["message"]
    error = await refused(service, http, 422, "POST", "/v1/batches", headers=AUTH,
                          json={"config": run_config(tasks, harness={"name": "sleepy", "second": 1})})
    assert "config.harness.second" in error["message"] and "seconds" in error["message"]
    error = await refused(service, http, 422, "POST", "/v1/batches", headers=AUTH,
                          json={"config": run_config(tmp_path / "no-such-tasks")})
    assert "no such task" in error["message"]
    error = await refused(service, http, 422, "POST", "/v1/batches", headers=AUTH,
                          json={"config": run_config(tasks, runtime={"out": "elsewhere"})})
    assert "config.runtime.out" in error["message"]


async def test_no_valid_token_is_401_before_the_body_is_read(service_http, tasks):
    service, http = service_http
    body = {"config": run_config(tasks, harness={"name": "nop"})}
    for headers in ({}, {"Authorization": "Bearer wrong-token-" + "z" * 20}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": f"Bearer {TOKEN[:-1]}"}):
        error = await refused(service, http, 401, "POST", "/v1/batches", json=body, headers=headers)
        assert error["code"] == "unauthorized"
    error = await refused(service, http, 401, "POST", "/v1/batches", content=b"{broken", headers={})
    assert error["code"] == "unauthorized"
    for method, path in (("GET", "/v1/batches"), ("POST", "/v1/sql"), ("GET", "/v1/rollouts/x")):
        await refused(service, http, 401, method, path, content=json.dumps({"query": "SELECT 1"}))
    assert (await http.get("/v1/batches", headers={"Authorization": f"Bearer {OTHER_TOKEN}"})).status_code == 200


async def test_unknown_ids_and_routes_are_404_and_a_wrong_method_405(service_http):
    service, http = service_http
    assert (await refused(service, http, 404, "GET", "/v1/batches/b-nope", headers=AUTH))["code"] == "batch_not_found"
    assert (await refused(service, http, 404, "POST", "/v1/rollouts/r-nope/cancel",
                          headers=AUTH))["code"] == "rollout_not_found"
    assert (await refused(service, http, 404, "GET", "/v2/nothing", headers=AUTH))["code"] == "not_found"
    assert (await refused(service, http, 405, "DELETE", "/v1/batches", headers=AUTH))["code"] == "method_not_allowed"
