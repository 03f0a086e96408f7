"""What every part of a gateway shares: its settings, the engine client, the chat template and tool parser it
renders and parses with, and the engine's liveness. The session store, the chat handler and the route table
are each given this one object (:class:`EngineBackend`) rather than reaching into the gateway."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from tackroom_gateway.chat_template import ChatTemplate
from tackroom_gateway.engine_client import EngineClient, EngineSettings
from tackroom_gateway.errors import GatewayError
from tackroom_gateway.liveness import EngineLiveness
from tackroom_gateway.tool_parsers import ToolParser, get_tool_parser
from tackroom_gateway.weight_updates import WeightGate


class GatewaySettings(BaseModel):
    """How to run a gateway."""

    engine: EngineSettings
    tokenizer: str = "smollm2"
    """A tokenizer folder, or ``smollm2``/``qwen3`` (materialised on first use)."""
    tool_parser: str = "auto"
    """``hermes``, ``qwen3`` or ``auto`` (``qwen3`` when the vocabulary has ``<think>``, else ``hermes``)."""
    model_name: str | None = None
    """Name advertised on ``/v1/models``; defaults to the engine's served model name."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 picks a free port."""
    startup_timeout_s: float = 60.0

    def public_url(self, port: int | None) -> str:
        """The URL clients reach a gateway bound with these settings on ``port`` at (a wildcard host: loopback)."""
        if port is None:
            raise GatewayError("gateway not started: await start() first")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{port}"

    @classmethod
    def for_engine(cls, engine_url: str, *, tokenizer: str = "smollm2", model: str | None = None,
                   tool_parser: str = "auto", host: str = "127.0.0.1", port: int = 0,
                   **engine_options: Any) -> GatewaySettings:
        """The settings from the few values a caller usually has (``build_gateway``, ``tackroom gateway``)."""
        return cls(engine=EngineSettings(base_url=engine_url, model=model, **engine_options), tokenizer=tokenizer,
                   tool_parser=tool_parser, model_name=model, host=host, port=port)


class EngineBackend:
    """The engine a gateway fronts and how it talks to it. ``engine``, ``template`` and ``parser`` are set by
    :meth:`prepare` (a ``template`` given up front is kept); ``liveness`` watches the engine from the start;
    ``weights`` holds model calls across a weight update (:mod:`tackroom_gateway.weight_updates`)."""

    def __init__(self, settings: GatewaySettings, template: ChatTemplate | None = None) -> None:
        self.settings = settings
        self.template = template
        self.parser: ToolParser | None = None
        self.engine: EngineClient | None = None
        self.liveness = EngineLiveness(settings.engine.probe_interval_s, settings.engine.probe_timeout_s)
        self.weights = WeightGate(wait_s=settings.engine.timeouts.read)

    async def prepare(self) -> None:
        """Ask the engine for its model, then load the tokenizer/template; idempotent.

        The engine first: an engine that is not there fails in a second, before the tokenizer's load
        (transformers, and torch where it is installed: the slowest part of a gateway's start).
        """
        if self.engine is None:
            self.engine = EngineClient(self.settings.engine)
        if self.engine.info is None:
            await self.engine.fetch_info()
        if self.template is None:
            self.template = await asyncio.to_thread(ChatTemplate.from_path, self.settings.tokenizer)
        if self.parser is None:
            name = self.settings.tool_parser
            if name == "auto":
                name = "qwen3" if self.template.think_tokens else "hermes"
            self.parser = get_tool_parser(name)

    async def aclose(self) -> None:
        """Close the engine client (a later :meth:`prepare` opens a new one)."""
        if self.engine is not None:
            await self.engine.aclose()
            self.engine = None

    @property
    def model_name(self) -> str:
        """What the gateway advertises: the configured name, else the engine's served model."""
        if self.settings.model_name:
            return self.settings.model_name
        if self.engine is not None and self.engine.info is not None:
            return self.engine.info.model
        return self.settings.engine.model or "tackroom-policy"

    def probe_prompt(self) -> list[int]:
        """The one-token prompt a liveness probe sends (the template's end-of-turn id)."""
        eot = self.template.end_of_turn_id if self.template is not None else None
        return [eot if eot is not None else 0]
