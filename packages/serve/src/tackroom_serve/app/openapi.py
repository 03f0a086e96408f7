"""The OpenAPI 3.1 document (``GET /openapi.json``), built from the route table and its pydantic models, so what
it says is what the handlers validate."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tackroom_serve.app.routes import Operation
from tackroom_serve.models import ErrorBody, Outcome

REF = "#/components/schemas/{model}"
ERRORS = {"400": "malformed JSON or a refused SQL statement", "401": "no valid bearer token",
          "404": "no such batch or rollout", "409": "the state does not allow it (or an idempotency key reused "
          "with another body)", "413": "the body is over the size limit", "422": "a field is wrong or unknown "
          "(the answer lists the valid ones), or the run config cannot run"}


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _parameters(op: Operation) -> list[dict[str, Any]]:
    params = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
              for name in re.findall(r"{(\w+)}", op.path)]
    if op.query is not None:
        schema = op.query.model_json_schema()
        for name, prop in schema.get("properties", {}).items():
            params.append({"name": name, "in": "query", "required": name in schema.get("required", []),
                           "schema": prop, "description": prop.get("description", "")})
    if op.body is not None and op.path == "/v1/batches":
        params.append({"name": "Idempotency-Key", "in": "header", "required": False, "schema": {"type": "string"},
                       "description": "A repeat with the same key and body returns the same batch; with another "
                                      "body, 409"})
    if op.stream:
        params.append({"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"},
                       "description": "Resume after this event id"})
    return params


def _operation(op: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    if op.stream:
        responses[str(op.status)] = {"description": "text/event-stream of `outcome` events (data: Outcome), then "
                                     "`end` (data: BatchView)", "content": {"text/event-stream": {}}}
    else:
        content = {"application/json": {"schema": _ref(op.response)}} if op.response else {}
        responses[str(op.status)] = {"description": "OK", "content": content}
    if op.path == "/v1/batches" and op.method == "POST":
        responses["200"] = {"description": "the batch this Idempotency-Key already created",
                            "content": {"application/json": {"schema": _ref(op.response)}}}
    for status, why in ERRORS.items():
        if status != "401" or op.auth:
            responses[status] = {"description": why, "content": {"application/json": {"schema": _ref(ErrorBody)}}}
    doc: dict[str, Any] = {"summary": op.summary, "operationId": op.handler.__name__,
                           "parameters": _parameters(op), "responses": responses}
    if op.body is not None:
        doc["requestBody"] = {"required": False, "content": {"application/json": {"schema": _ref(op.body)}}}
    if not op.auth:
        doc["security"] = []
    return doc


def openapi_document(operations: list[Operation], version: str) -> dict[str, Any]:
    models = {m for op in operations for m in (op.body, op.response) if m is not None} | {ErrorBody, Outcome}
    _, schemas = models_json_schema([(m, "validation") for m in sorted(models, key=lambda m: m.__name__)],
                                    ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {"title": "tackroom serve", "version": version,
                 "description": "Rollouts of tackroom's harnesses, sandboxes and graders over HTTP."},
        "components": {"schemas": schemas.get("$defs", {}),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
