"""Image tool results: sent as content parts to a chat endpoint, as placeholders on a text-only token path, and
checked (size, base64, file type) before either, so a hostile server cannot crash the loop."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest
from archipelago_scripted_engine import ScriptedChatEngine, ScriptedEngine, call
from mcp.types import ImageContent

import tackroom_app
from tackroom import ConfigError, Policy
from tackroom_archipelago import ArchipelagoHarness
from tackroom_archipelago.images import read_image, sniff

FILES = Path(__file__).parent / "worlds" / "pictures" / "files"
PLACEHOLDER = "[image image/png, 69 bytes: not shown, this model reads text only]"


def pixel(png: bytes) -> tuple[int, int, int]:
    """The colour of a one-pixel RGB PNG (what a vision model would see)."""
    at = png.index(b"IDAT")
    size = struct.unpack(">I", png[at - 4:at])[0]
    raw = zlib.decompress(png[at + 4:at + 4 + size])
    return raw[1], raw[2], raw[3]


def look_for_red(body: dict) -> str:
    """The scripted policy's last turn: read the images it was sent and name the red one."""
    parts = body["messages"][-1]["content"]
    labels = [p["text"] for p in parts if p["type"] == "text"]
    images = [base64.b64decode(p["image_url"]["url"].split(",", 1)[1]) for p in parts if p["type"] == "image_url"]
    paths = [m["content"].split(":")[0] for m in body["messages"] if m["role"] == "tool"]
    red = next(i for i, png in enumerate(images) if pixel(png) == (255, 0, 0))
    assert len(labels) == len(images) == len(paths) == 3
    return f"The red picture is {paths[red]}."


READ_ALL = "\n".join(call("pics_read_image", path=f"animals/{n}.png") for n in ("cat", "dog", "fox"))


async def test_a_vision_endpoint_gets_the_images_and_the_scripted_policy_solves_the_task(pictures_task, pictures_sandbox):
    harness = ArchipelagoHarness({"max_steps": 3, "answer_path": "/app/answer.txt"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedChatEngine([READ_ALL, look_for_red]) as engine:
        traj = await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted-vision"))
    assert traj.stop_reason == "completed" and traj.final_answer == "The red picture is animals/fox.png."
    sent = engine.requests[-1]["messages"]
    tools = [m for m in sent if m["role"] == "tool"]
    assert tools[2]["content"] == "animals/fox.png:\n[image 3: image/png, 69 bytes; shown in the next message]"
    # The images ride in one user message after the tool messages, byte for byte what the files hold.
    parts = sent[-1]["content"]
    assert sent[-1]["role"] == "user" and parts[4] == {"type": "text", "text": "Image 3 (from pics_read_image):"}
    url = parts[5]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == (FILES / "animals" / "fox.png").read_bytes()
    assert traj.metrics["images"] == 3.0
    reward = await tackroom_app.instantiate("verifier", "test-script").verify(pictures_task, pictures_sandbox, traj)
    assert reward.score == 1.0, reward.details


async def test_a_text_only_token_path_records_the_placeholder(pictures_task, pictures_sandbox):
    # /v1/completions with token ids carries no pixels: images = auto shows the placeholder, and the trajectory's
    # ids are exactly what the model read.
    harness = ArchipelagoHarness({"max_steps": 2})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedEngine([call("pics_read_image", path="animals/fox.png"), "It is red, I cannot tell."]) as engine:
        traj = await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted"))
    tool = next(m for m in traj.messages if m["role"] == "tool")
    assert tool["content"] == f"animals/fox.png:\n{PLACEHOLDER}"
    assert not any(m["role"] == "user" and isinstance(m["content"], list) for m in traj.messages)
    assert PLACEHOLDER in engine.template.decode(engine.requests[-1]["prompt"])
    assert traj.token_ids == traj.turns[-1].prompt_ids + traj.turns[-1].completion_ids


async def test_through_the_policy_gateway_the_image_part_is_recorded_as_the_placeholder(pictures_task, pictures_sandbox):
    from tackroom_gateway import EngineSettings, GatewaySettings, PolicyGateway

    harness = ArchipelagoHarness({"max_steps": 2, "endpoint": "chat"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedEngine([call("pics_read_image", path="animals/fox.png"), "Done."]) as engine:
        settings = GatewaySettings(engine=EngineSettings(base_url=engine.url, retries=0))
        async with PolicyGateway(settings, template=engine.template) as gateway:
            traj = await harness.run(pictures_task, pictures_sandbox, gateway.policy("t1"))
            recorded = gateway.trajectory("t1")
    # The harness sent an image part; the gateway's text-only engine got the placeholder's tokens.
    assert isinstance(traj.messages[-2]["content"], list) and traj.messages[-2]["role"] == "user"
    seen = engine.template.decode(engine.requests[-1]["prompt"])
    assert f"Image 1 (from pics_read_image):{PLACEHOLDER}" in seen and "iVBOR" not in seen
    # Exact tokens: the harness's flattened sequence is the gateway's, and each prompt extends the one before.
    assert traj.token_ids and traj.token_ids == recorded.token_ids and traj.loss_mask == recorded.loss_mask
    assert traj.turns[1].prompt_ids[: len(traj.turns[0].prompt_ids)] == traj.turns[0].prompt_ids


async def test_hostile_image_results_become_notes_and_the_episode_goes_on(pictures_task, pictures_sandbox):
    script = [call("pics_huge_image") + "\n" + call("pics_broken_image") + "\n" + call("pics_fake_image"), "Nothing to see."]
    harness = ArchipelagoHarness({"max_steps": 2, "image_max_bytes": 100_000})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedChatEngine(script) as engine:
        traj = await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted-vision"))
    huge, broken, fake = (m["content"] for m in traj.messages if m["role"] == "tool")
    assert huge.startswith("[image dropped: about 300,000 bytes (image/png), over the 100,000-byte limit")
    assert broken == "[image dropped: the server sent data that is not valid base64 (image/png)]"
    assert fake == "[image dropped: 19 bytes claimed as image/png are not a PNG, JPEG, GIF or WebP image]"
    assert traj.stop_reason == "completed" and traj.metrics["images"] == 0.0
    assert not any(m["role"] == "user" and isinstance(m["content"], list) for m in engine.requests[-1]["messages"])


async def test_placeholder_mode_declares_a_text_only_model_on_the_chat_endpoint(pictures_task, pictures_sandbox):
    harness = ArchipelagoHarness({"max_steps": 2, "images": "placeholder"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedChatEngine([call("pics_read_image", path="/animals/cat.png"), "Blue."]) as engine:
        await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted"))
    sent = engine.requests[-1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": sent[-1]["tool_call_id"], "name": "pics_read_image",
                        "content": f"/animals/cat.png:\n{PLACEHOLDER}"}


async def test_send_on_the_completions_endpoint_is_a_config_error(pictures_task, pictures_sandbox):
    harness = ArchipelagoHarness({"images": "send"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedEngine([]) as engine:
        with pytest.raises(ConfigError, match="images = 'send' needs the chat endpoint"):
            await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted"))


def test_image_checks_sniff_the_type_and_cap_before_decoding():
    webp = b"RIFF\x10\x00\x00\x00WEBPVP8 "
    assert [sniff(b) for b in (webp, b"\xff\xd8\xff\xe0", b"GIF89a..", b"<svg/>")] == [
        "image/webp", "image/jpeg", "image/gif", None]
    gif = ImageContent(type="image", data=base64.b64encode(b"GIF89a" + bytes(10)).decode(), mime_type="image/png")
    kept = read_image(gif, 100)
    assert kept.mime_type == "image/gif" and kept.size == 16  # the bytes' type wins over the claim
    assert read_image(gif, 15).startswith("[image dropped: about 16 bytes")


async def test_a_result_over_the_exec_output_cap_is_told_to_the_model(pictures_task, pictures_sandbox):
    # Through the exec relay the sandbox caps a command's output (1 MB on the local sandbox): the call fails as a
    # tool error the model reads, and the session goes on (before: a broken transport, a dead MCP session).
    script = [call("pics_huge_image", chars=3_000_000), call("pics_read_image", path="animals/dog.png"), "Green."]
    harness = ArchipelagoHarness({"max_steps": 3, "transport": "exec", "images": "placeholder"})
    await harness.setup(pictures_sandbox, pictures_task)
    async with ScriptedChatEngine(script) as engine:
        traj = await harness.run(pictures_task, pictures_sandbox, Policy(base_url=engine.url, model="scripted"))
    huge, dog = (m["content"] for m in traj.messages if m["role"] == "tool")
    assert huge.startswith("Error calling tool pics_huge_image:") and "exec output limit" in huge
    assert dog == f"animals/dog.png:\n{PLACEHOLDER}"
    assert traj.stop_reason == "completed" and traj.metrics["mcp_reconnects"] == 0.0
