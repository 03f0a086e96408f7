"""Test doubles for what the gateway (and harnesses behind it) talk to.

``MisbehavingEngine``: an OpenAI-compatible engine (``/v1/completions`` with token
ids and ``/v1/chat/completions``, served by uvicorn in the test's event loop),
scripted with ``EngineReply`` to answer 429 with ``Retry-After``, 503, an HTML 500,
hang, drop the connection, send non-JSON or truncated JSON, or succeed after N
failures, so a harness's or gateway's handling of infra faults can be tested. The
conformance kits and the scripted chat server stay in core's ``tackroom.testing``.
"""

from tackroom_gateway.testing._served import AsgiServedForTests
from tackroom_gateway.testing.misbehaving_engine import EngineReply, EngineRequest, MisbehavingEngine

__all__ = ["EngineReply", "EngineRequest", "MisbehavingEngine", "AsgiServedForTests"]
