"""Requests in and answers out: the body read within its size limit, JSON parsed, a model validated (a wrong
field is a 422 that names what exists there), and every error as ``{"error": {"code", "message", "errors"}}``."""

from __future__ import annotations

import json
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tackroom_app import format_validation_error
from tackroom_serve.models import ErrorBody, ErrorDetail, FieldProblem

M = TypeVar("M", bound=BaseModel)


class ApiError(Exception):
    """An answer other than success: ``status``, a stable ``code`` and a message that says what to do."""

    def __init__(self, status: int, code: str, message: str, errors: list[FieldProblem] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors or []

    def response(self) -> Response:
        body = ErrorBody(error=ErrorDetail(code=self.code, message=self.message, errors=self.errors))
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return JSONResponse(body.model_dump(mode="json", exclude_none=True), status_code=self.status, headers=headers)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 past ``limit`` bytes (by its ``Content-Length``, or while it streams in)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is {int(declared):,} bytes; at most {limit:,} are taken "
                       "(the service's --max-body-mb); split the batch")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body is over {limit:,} bytes (the service's --max-body-mb)")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(raw: bytes) -> Any:
    """An empty body is ``{}``; anything but a JSON object is 400."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "malformed_json", f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "malformed_json", f"the body must be a JSON object, got {type(data).__name__}")
    return data


def fields_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The fields of the model a location points into (``("config", "runtime")`` → RuntimeConfig's)."""
    current = model
    for part in loc:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return None
        models = [a for a in (field.annotation, *get_args(field.annotation))
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        if not models:
            return None
        current = models[0]
    return sorted(current.model_fields)


def validated(model: type[M], data: Any, *, what: str = "body") -> M:
    """``data`` as ``model``, or a 422 listing each problem (and, for an unknown field, the valid ones)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if p != "function-after")
            path = ".".join(str(p) for p in loc) or "(top level)"
            unknown = err["type"] == "extra_forbidden"
            problems.append(FieldProblem(path=path, message="unknown field" if unknown else err["msg"],
                                         valid_fields=fields_at(model, loc[:-1]) if unknown else None))
        message = format_validation_error(exc, sep="; ")
        listed = {p.path.rpartition(".")[0]: p.valid_fields for p in problems if p.valid_fields is not None}
        for where, valid in listed.items():
            message += f"; valid fields{' of ' + where if where else ''}: {', '.join(valid or [])}"
        raise ApiError(422, f"invalid_{what}", message, problems) from None


def query_of(model: type[M], request: Request) -> M:
    """The query string as ``model`` (an unknown parameter is a 422 that lists the valid ones)."""
    return validated(model, dict(request.query_params), what="query")


def answer(model: BaseModel, status: int = 200) -> Response:
    return JSONResponse(model.model_dump(mode="json", by_alias=True), status_code=status)
