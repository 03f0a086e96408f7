"""``--backend tinker`` pieces without a Tinker server: advantages, datums, the loss bridge, the mismatch check,
the vLLM-style sampling endpoint (with a scripted sampler, and read by the gateway's real engine client),
the server's failure paths and the config.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import torch

from tackroom import ConfigError
from tackroom_app import get_plugin_manager
from tackroom_gateway import (
    ContextLengthExceededError,
    EngineClient,
    EngineRequestError,
    EngineSettings,
    EngineUnavailableError,
    load_tokenizer,
)
from tackroom_train.config import TrainConfig, load_train_config
from tackroom_train.tinker import curve
from tackroom_train.tinker.datums import (
    TackroomLoss,
    aggregation_factors,
    batch_from_output,
    datums,
    grpo_advantages,
    mismatch,
    reduced_loss,
)
from tackroom_train.tinker.loop import resolve_base_model, run_tinker, total_steps
from tackroom_train.tinker.sampling_endpoint import SamplingEndpoint, sampled_max_tokens
from tackroom_train.tinker.server import TinkerServer, TinkerServerError, TinkerSettings

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


# -- advantages and aggregation -----------------------------------------------------------
def test_grpo_advantages_per_group_masked_rows_get_zero() -> None:
    rewards = [1.0, 0.0, 0.5, 0.5, 9.0]
    groups = ["a", "a", "b", "b", "a"]
    masked = [False, False, False, False, True]
    adv = grpo_advantages(rewards, groups, masked, normalize=False)
    assert adv == [0.5, -0.5, 0.0, 0.0, 0.0]  # the masked 9.0 moves no baseline
    norm = grpo_advantages(rewards, groups, masked)
    assert norm[0] == pytest.approx(1.0, rel=1e-4) and norm[1] == pytest.approx(-1.0, rel=1e-4)
    assert norm[2:] == [0.0, 0.0, 0.0]


def test_a_batch_whose_groups_all_agree_has_no_learning_signal() -> None:
    """Every group solved (or every group failed): all advantages are 0, so the loop takes no optimiser step."""
    out = {**_output(), "rewards": [1.0, 1.0, 0.0]}
    groups, masked = ["a", "a", "b"], [False, False, True]
    batch = batch_from_output(out, grpo_advantages(out["rewards"], groups, masked), groups, "sequence_mean")
    assert batch.trained_rows == 2 and not batch.has_signal
    out["rewards"] = [1.0, 0.5, 0.0]  # one group with a spread is enough
    batch = batch_from_output(out, grpo_advantages(out["rewards"], groups, masked), groups, "sequence_mean")
    assert batch.has_signal
    # a masked row's advantage is no signal either
    lone = batch_from_output(out, [0.0, 0.0, 3.0], groups, "sequence_mean")
    assert not lone.has_signal


def test_aggregation_factors() -> None:
    masks = [[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1]]
    groups = ["a", "a", "b", "b"]
    assert aggregation_factors(masks, groups, "token_mean") == [1 / 6] * 4
    assert aggregation_factors(masks, groups, "sequence_mean") == [1 / 8, 1 / 4, 1 / 4, 1 / 12]
    assert aggregation_factors(masks, groups, "prompt_mean") == [1 / 6, 1 / 6, 1 / 6, 1 / 6]
    with pytest.raises(ValueError, match="unknown aggregation"):
        aggregation_factors(masks, groups, "mean")


def _output() -> dict:
    return {
        "prompt_token_ids": [[1, 2, 3], [1, 2, 3], [4, 5]],
        "response_ids": [[10, 11, 2], [12, 2], [13]],
        "loss_masks": [[1, 1, 1], [1, 1], [0]],
        "rollout_logprobs": [[-0.5, -1.0, -0.1], [-2.0, -0.2], [0.0]],
        "rewards": [1.0, 0.0, 0.0],
    }


def test_datums_align_response_tokens_with_target_positions() -> None:
    out = _output()
    batch = batch_from_output(out, [1.0, -1.0, 0.0], ["a", "a", "b"], "token_mean")
    assert batch.trained_rows == 2 and len(batch.rows) == 3  # the masked row stays: fixed batch shape
    d = datums(batch, with_advantages=True)
    seq = [1, 2, 3, 10, 11, 2]
    assert d[0].model_input.to_ints() == seq[:-1]
    assert list(d[0].loss_fn_inputs["target_tokens"].data) == seq[1:]
    # response token j sits at target position len(prompt) - 1 + j; advantage 1 × c (token_mean: 1/5)
    # × n_b (3) × B (3), undoing the server's per-sequence mean and batch mean
    assert list(d[0].loss_fn_inputs["advantages"].data) == pytest.approx([0, 0, 1.8, 1.8, 1.8])
    assert list(d[0].loss_fn_inputs["weights"].data) == [0, 0, 1, 1, 1]
    assert list(d[0].loss_fn_inputs["logprobs"].data) == pytest.approx([0, 0, -0.5, -1.0, -0.1])
    assert list(d[2].loss_fn_inputs["advantages"].data) == [0.0, 0.0]
    plain = datums(batch, with_advantages=False)
    assert set(plain[0].loss_fn_inputs) == {"target_tokens"}  # what Tinker's custom-loss path accepts


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "prompt_mean"])
def test_server_reduction_of_the_datums_is_the_aggregation(aggregation: str) -> None:
    """SkyRL's JAX backend: (1/B) Σ_b (Σ_t w ℓ) / max(Σ_t w, 1e-9) with ℓ = -ratio·A (ratio 1 on-policy)."""
    out = {"prompt_token_ids": [[1, 2], [1, 2], [3], [3]], "response_ids": [[5, 6, 7], [8], [9, 9], [4, 4, 4, 4]],
           "loss_masks": [[1, 1, 1], [1], [1, 0], [0, 0, 0, 0]], "rollout_logprobs": [[0.0] * 3, [0.0], [0.0] * 2, [0.0] * 4]}
    adv = [0.7, -0.7, 1.3, 0.0]
    groups = ["a", "a", "b", "b"]
    batch = batch_from_output(out, adv, groups, aggregation)
    data = datums(batch, with_advantages=True)
    # the server's per-token loss: -(ratio · advantage), masked by the weights
    outputs = [{"elementwise_loss": SimpleNamespace(data=[w * -a for w, a in zip(d.loss_fn_inputs["weights"].data,
                                                                                d.loss_fn_inputs["advantages"].data)])}
               for d in data]
    server = reduced_loss(data, outputs)
    c = aggregation_factors(out["loss_masks"], groups, aggregation)
    wanted = sum(-c[b] * adv[b] * sum(out["loss_masks"][b]) for b in range(4))
    assert server == pytest.approx(wanted)


def test_tackroom_losses_map_to_the_builtin_they_equal_on_policy() -> None:
    """Each loss's own LossSpec.mappings["tinker"] (tackroom-losses declares them); the trainer keeps no table."""
    from tackroom import LossSpec
    from tackroom_train.plan import LossPlan
    from tackroom_train.tinker.step_trainer import tinker_builtin

    manager = get_plugin_manager()
    ppo = manager.get("loss", "ppo_clip")

    def builtin(name: str, options: Any = None) -> tuple:
        spec = manager.get("loss", name)
        return tinker_builtin(LossPlan(spec=spec, options=options or spec.Options(), aggregation="token_mean"))

    assert builtin("ppo_clip", ppo.Options(eps_clip_low=0.2, eps_clip_high=0.28)) == (
        "ppo", {"clip_low_threshold": pytest.approx(0.8), "clip_high_threshold": pytest.approx(1.28)})
    assert builtin("dppo") == ("importance_sampling", None)
    assert builtin("glm5") == ("importance_sampling", None)
    my_loss = LossSpec(name="my_loss", fn="math:fsum")
    with pytest.raises(ValueError, match="no Tinker built-in"):
        tinker_builtin(LossPlan(spec=my_loss, options=my_loss.Options(), aggregation="token_mean"))


def test_batch_without_logprobs_for_a_trained_row_is_refused() -> None:
    out = {**_output(), "rollout_logprobs": None}
    with pytest.raises(ValueError, match="no logprobs"):
        batch_from_output(out, [0.0] * 3, ["a", "a", "b"], "token_mean")


def test_mismatch_over_trained_tokens_only() -> None:
    batch = batch_from_output(_output(), [0.0] * 3, ["a", "a", "b"], "token_mean")
    trainer = [[9, 9, -0.5, -1.1, -0.1], [9, 9, -2.0, -0.5], [7.0]]
    m = mismatch(batch, trainer)
    assert m["mismatch_mean"] == pytest.approx((0 + 0.1 + 0 + 0 + 0.3) / 5)
    assert m["mismatch_max"] == pytest.approx(0.3)


# -- the loss bridge ------------------------------------------------------------------------
@pytest.mark.parametrize("name,aggregation", [("dppo", "prompt_mean"), ("ppo_clip", "token_mean"), ("glm5", "sequence_mean")])
def test_tackroom_loss_equals_the_loss_on_the_response_slice(name: str, aggregation: str) -> None:
    spec = get_plugin_manager().get("loss", name)
    out = _output()
    batch = batch_from_output(out, [1.0, -1.0, 0.0], ["a", "a", "b"], aggregation)
    full = [torch.tensor([-9.0, -9.0, -0.4, -1.0, -0.3], requires_grad=True),
            torch.tensor([-9.0, -9.0, -1.9, -0.2], requires_grad=True),
            torch.tensor([-3.0], requires_grad=True)]
    loss_fn = TackroomLoss(spec, spec.Options(), batch)
    loss, metrics = loss_fn(datums(batch, with_advantages=False), full)
    loss.backward()
    # prompt positions and masked rows get no gradient; trained response tokens do
    assert full[0].grad[:2].abs().sum() == 0 and full[0].grad[2:].abs().sum() > 0
    assert full[2].grad.abs().sum() == 0
    assert loss_fn.trainer_logprobs[0] == pytest.approx([-9.0, -9.0, -0.4, -1.0, -0.3])
    assert isinstance(loss_fn.last_loss, float) and all(isinstance(v, float) for v in metrics.values())
    # the same number as calling the loss on [rows, response tokens] directly
    lp = torch.tensor([[-0.4, -1.0, -0.3], [-1.9, -0.2, 0.0], [-3.0, 0.0, 0.0]])
    roll = torch.tensor([[-0.5, -1.0, -0.1], [-2.0, -0.2, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3, [0.0] * 3])
    direct, _ = spec.load()(lp, roll, adv, spec.Options(), mask, roll, aggregation=aggregation,
                            group_ids=torch.tensor([0, 0, 1]), num_groups=2)
    assert loss.item() == pytest.approx(direct.item(), rel=1e-5)


# -- the sampling endpoint ------------------------------------------------------------------
class ScriptedSampler:
    """Answers like ``tinker.SamplingClient.sample_async``; records what it was asked."""

    def __init__(self, tokens: list[int], logprobs: list[float], stop_reason: str = "stop", fail: bool = False) -> None:
        self.tokens, self.logprobs, self.stop_reason, self.fail = tokens, logprobs, stop_reason, fail
        self.calls: list[tuple[list[int], object]] = []

    async def sample_async(self, prompt, num_samples, sampling_params):
        self.calls.append((prompt.to_ints(), sampling_params))
        if self.fail:
            raise RuntimeError("engine process died")
        return SimpleNamespace(sequences=[SimpleNamespace(tokens=self.tokens, logprobs=self.logprobs,
                                                          stop_reason=self.stop_reason)])


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2")


async def test_endpoint_speaks_vllm_completions_with_token_ids(tokenizer) -> None:
    hello = tokenizer.encode("Hello there", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    sampler = ScriptedSampler([*hello, eos], [-0.5] * len(hello) + [-0.01])
    async with SamplingEndpoint(sampler, tokenizer, "tiny", max_model_len=64) as ep:
        client = EngineClient(EngineSettings(base_url=ep.base_url, retries=0))
        try:
            info = await client.fetch_info()
            assert (info.model, info.max_model_len) == ("tiny", 64)
            result = await client.complete({"prompt": [1, 2, 3], "max_tokens": 8, "temperature": 0.7, "top_p": 0.9})
            chunks = [c async for c in client.stream({"prompt": [1, 2, 3], "max_tokens": 8})]
        finally:
            await client.aclose()
    assert result.completion_ids == [*hello, eos] and result.prompt_ids == [1, 2, 3]
    assert result.logprobs == [-0.5] * len(hello) + [-0.01]
    assert result.text == "Hello there" and result.finish_reason == "stop" and result.stop_reason == eos
    assert [t for c in chunks for t in c.token_ids] == [*hello, eos] and chunks[-1].finish_reason == "stop"
    prompt, params = sampler.calls[0]
    assert prompt == [1, 2, 3]
    # sampled with max_tokens 16 (one of few sizes: SkyRL's JAX sampler compiles per max_tokens), asked 8
    assert (params.max_tokens, params.temperature, params.top_p, list(params.stop)) == (16, 0.7, 0.9, [eos])


@pytest.mark.parametrize(("requested", "room", "sampled"), [
    (1, None, 16), (16, None, 16), (17, None, 24), (25, None, 32), (33, None, 48), (96, None, 96), (97, None, 128),
    (129, None, 192), (1000, None, 1024), (17, 20, 17), (100, 127, 100), (100, 128, 128)])
def test_sampled_max_tokens_are_few_sizes_that_fit(requested: int, room: int | None, sampled: int) -> None:
    assert sampled_max_tokens(requested, room) == sampled


async def test_endpoint_cuts_a_longer_sample_to_what_was_asked(tokenizer) -> None:
    words = tokenizer.encode(" one two three four five six seven eight nine ten", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    assert len(words) >= 6
    sampler = ScriptedSampler([*words[:6], eos], [-0.1, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7])
    async with SamplingEndpoint(sampler, tokenizer, "tiny", max_model_len=64) as ep:
        client = EngineClient(EngineSettings(base_url=ep.base_url, retries=0))
        try:
            cut = await client.complete({"prompt": [1, 2, 3], "max_tokens": 3})  # the stop token lies past 3
            exact = await client.complete({"prompt": [1, 2, 3], "max_tokens": 7})  # it is the 7th: kept, a stop
            room = await client.complete({"prompt": list(range(50)), "max_tokens": 14})  # 16 would not fit in 64
        finally:
            await client.aclose()
    assert [c[1].max_tokens for c in sampler.calls] == [16, 16, 14]
    assert cut.completion_ids == words[:3] and cut.logprobs == [-0.1, -0.2, -0.3]
    assert cut.finish_reason == "length" and cut.stop_reason is None
    assert exact.completion_ids == [*words[:6], eos] and exact.finish_reason == "stop" and exact.stop_reason == eos
    assert room.completion_ids == [*words[:6], eos] and room.finish_reason == "stop"


async def test_endpoint_errors_are_the_ones_the_gateway_classifies(tokenizer) -> None:
    sampler = ScriptedSampler([5], [-1.0], stop_reason="length")
    async with SamplingEndpoint(sampler, tokenizer, "tiny", max_model_len=16) as ep:
        client = EngineClient(EngineSettings(base_url=ep.base_url, retries=0))
        try:
            with pytest.raises(ContextLengthExceededError):
                await client.complete({"prompt": list(range(10)), "max_tokens": 10})
            with pytest.raises(EngineRequestError, match="n > 1"):
                await client.complete({"prompt": [1], "max_tokens": 2, "n": 2})
            with pytest.raises(EngineRequestError, match="prompt must be"):
                await client.complete({"prompt": {"oops": 1}, "max_tokens": 2})
            length = await client.complete({"prompt": "Hi", "max_tokens": 1, "stop": ["\n"]})
            assert length.finish_reason == "length" and length.stop_reason is None
            # stop strings and stop ids cannot be mixed in Tinker: the EOS id goes along as its text
            assert list(sampler.calls[-1][1].stop) == [tokenizer.decode([tokenizer.eos_token_id]), "\n"]
            sampler.fail = True
            with pytest.raises(EngineUnavailableError, match="engine process died"):
                await client.complete({"prompt": [1], "max_tokens": 2})
        finally:
            await client.aclose()


# -- the server ------------------------------------------------------------------------------
def test_server_refuses_a_base_model_that_is_not_a_folder(tmp_path: Path) -> None:
    server = TinkerServer(TinkerSettings(), str(tmp_path / "nope"), tmp_path / "state")
    with pytest.raises(TinkerServerError, match="local HF model folder"):
        server.start()


def _fake_server(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    monkeypatch.setattr("tackroom_train.tinker.server.prepare", lambda settings=None: Path("."))
    monkeypatch.setattr(TinkerServer, "command", lambda self, project: [sys.executable, "-c", script])


def test_server_that_exits_while_starting_says_so_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_server(monkeypatch, "print('ImportError: No module named aiohttp'); raise SystemExit(3)")
    server = TinkerServer(TinkerSettings(startup_timeout_s=30), str(tmp_path), tmp_path / "state")
    with pytest.raises(TinkerServerError, match=r"exited with 3(.|\n)*No module named aiohttp"):
        with server:
            pass


def test_server_that_never_answers_is_stopped_after_the_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_server(monkeypatch, "import time; time.sleep(60)")
    server = TinkerServer(TinkerSettings(startup_timeout_s=1.5), str(tmp_path), tmp_path / "state")
    with pytest.raises(TinkerServerError, match="did not answer"):
        server.start()
    assert server.proc is not None and server.proc.poll() is not None  # killed, not left behind


def test_server_keeps_jax_compiled_kernels_for_the_next_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    _fake_server(monkeypatch, "import os; print('cache:' + os.environ.get('JAX_COMPILATION_CACHE_DIR', '-'))")
    settings = TinkerSettings(startup_timeout_s=30, server_dir=str(tmp_path / "server"))
    server = TinkerServer(settings, str(tmp_path), tmp_path / "state")
    with pytest.raises(TinkerServerError):
        server.start()
    assert f"cache:{tmp_path / 'server' / 'jax-cache'}" in server.tail()


def test_server_command_is_the_one_its_engine_relaunch_can_parse(tmp_path: Path) -> None:
    server = TinkerServer(TinkerSettings(port=1234, backend_config={"sample_max_num_sequences": 4}), "/m", tmp_path)
    argv = server.command(Path("/proj"))
    # skyrl.tinker.api rebuilds `uv run <flags> --extra tinker --extra jax -m skyrl.tinker.engine` from this
    assert argv[1:9] == ["run", "--project", "/proj", "--extra", "tinker", "--extra", "jax", "-m"]
    assert argv[9] == "skyrl.tinker.api"
    assert json.loads(argv[argv.index("--backend-config") + 1]) == {"sample_max_num_sequences": 4}
    assert argv[argv.index("--port") + 1] == "1234"


# -- config ----------------------------------------------------------------------------------
def test_overfit_example_is_a_tinker_run() -> None:
    config = load_train_config(EXAMPLES / "train" / "overfit.toml")
    assert config.backend == "tinker" and config.harness.name == "answer"
    assert config.tinker.backend_config["sample_max_num_sequences"] == config.train.mini_batch_size * config.train.samples_per_prompt
    assert total_steps(config.train, 3) == config.train.max_training_steps


def test_unknown_tinker_field_lists_the_fields(tmp_path: Path) -> None:
    p = tmp_path / "t.toml"
    p.write_text('tasks = ["x"]\n[model]\npath = "m"\n[tinker]\nlora = 4\n')
    with pytest.raises(ConfigError) as info:
        load_train_config(p)
    assert "tinker.lora" in str(info.value) and "lora_rank" in str(info.value)


def test_unknown_loss_fn_lists_the_choices(tmp_path: Path) -> None:
    p = tmp_path / "t.toml"
    p.write_text('tasks = ["x"]\n[model]\npath = "m"\n[tinker]\nloss_fn = "reinforce"\n')
    with pytest.raises(ConfigError, match=r"tinker\.loss_fn(.|\n)*importance_sampling"):
        load_train_config(p)


def test_custom_loss_path_is_refused_on_skyrl_jax_and_models_must_be_local(tmp_path: Path) -> None:
    config = TrainConfig.model_validate({"tasks": [str(EXAMPLES / "train" / "overfit-tasks")],
                                         "model": {"path": str(tmp_path / "missing")},
                                         "tinker": {"loss_fn": "tackroom"}})
    with pytest.raises(ConfigError, match="sum of its weights"):
        asyncio.run(run_tinker(config, tmp_path / "run", log=lambda s: None))
    config.tinker.loss_fn = "auto"
    with pytest.raises(ConfigError, match="local HF folder"):
        asyncio.run(run_tinker(config, tmp_path / "run", log=lambda s: None))
    with pytest.raises(ConfigError, match="local HF folder"):
        resolve_base_model("Qwen/Qwen3-0.6B")


def test_curve_files(tmp_path: Path) -> None:
    steps = [{"step": i, "mean_reward": r, "trained_trials": 12, "masked_trials": 0, "mismatch_mean": 0.01,
              "mismatch_max": 0.1, "loss": 0.1, "rollout_s": 1.0, "train_s": 2.0, "reward/a": r, "reward/b": r / 2}
             for i, r in enumerate([0.2, 0.4, 0.7], start=1)]
    csv_path = curve.write_csv(steps, tmp_path / "c.csv")
    lines = csv_path.read_text().splitlines()
    assert lines[0].split(",")[:2] == ["step", "mean_reward"] and lines[0].endswith("reward/a,reward/b")
    assert len(lines) == 4 and lines[3].startswith("3,0.7,")
    png = curve.write_png(steps, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "0.700" in curve.render_table(steps)


# -- the mismatch check on the SkyRL backend ----------------------------------------------
def test_mismatch_watch_warns_above_the_threshold_and_passes_everything_on() -> None:
    from tackroom_train.mismatch import SKYRL_METRIC, WARNING_METRIC, MismatchWatch

    logged: list[tuple[dict, int, dict]] = []
    tracker = SimpleNamespace(log=lambda data, step, **kw: logged.append((data, step, kw)), finish=lambda: "done")
    warnings: list[str] = []
    watch = MismatchWatch(tracker, 0.03, warn=warnings.append)
    watch.log({SKYRL_METRIC: 0.01, "loss": 1.0}, 1, commit=True)
    watch.log({SKYRL_METRIC: 0.07}, 2, commit=True)
    watch.log({"eval/reward": 0.5}, 3)
    assert [d.get(WARNING_METRIC) for d, _, _ in logged] == [0.0, 1.0, None]
    assert logged[0][0]["loss"] == 1.0 and logged[1][2] == {"commit": True}
    assert len(warnings) == 1 and "step 2" in warnings[0] and "0.0700" in warnings[0] and watch.warnings == 1
    assert watch.finish() == "done"  # everything else reaches SkyRL's tracker


# -- a Tinker server that is not there, dies or hangs: errors, never a hang ----------------
def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_at_the_url_fails_fast(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    config = load_train_config(EXAMPLES / "train" / "overfit.toml")
    config.tinker.url = url
    config.tinker.base_model = str(tmp_path)  # a folder: the model check passes, the server check must fail
    with pytest.raises(TinkerServerError, match=f"no Tinker server answers at {url}"):
        asyncio.run(run_tinker(config, tmp_path / "run", log=lambda s: None))


async def test_calls_fail_on_errors_timeouts_and_a_dead_server(tmp_path: Path) -> None:
    from tackroom_train.tinker.server import TinkerCalls

    async def boom() -> None:
        raise RuntimeError("forward_backward exploded")

    async def forever() -> None:
        await asyncio.sleep(3600)

    call = TinkerCalls(TinkerSettings(request_timeout_s=0.3), poll_s=0.05)
    assert await call("ok", asyncio.sleep(0, result=7)) == 7
    with pytest.raises(TinkerServerError, match="step 3: optim_step failed: RuntimeError: forward_backward exploded"):
        await call("step 3: optim_step", boom())
    with pytest.raises(TinkerServerError, match=r"no answer from the Tinker server within 0s"):
        await call("sample", forever())

    async def out_of_memory() -> None:  # what SkyRL's JAX server answers for a batch that does not fit
        raise ValueError("Error code: 400 - {'detail': 'RESOURCE_EXHAUSTED: Out of memory allocating 67119372536 bytes.'}")

    with pytest.raises(TinkerServerError, match=r"ran out of memory(.|\n)*gradient_checkpointing = true"):
        await call("sft step 1: forward_backward", out_of_memory())

    server = TinkerServer(TinkerSettings(), str(tmp_path), tmp_path)
    (tmp_path / "server.log").write_text("engine crashed: out of memory\n")
    server.proc = await asyncio.to_thread(lambda: __import__("subprocess").Popen([sys.executable, "-c", "exit(137)"]))
    await asyncio.to_thread(server.proc.wait)
    dead = TinkerCalls(TinkerSettings(request_timeout_s=60), server, poll_s=0.05)
    with pytest.raises(TinkerServerError, match=r"exited with 137(.|\n)*engine crashed: out of memory"):
        await dead("step 2: forward_backward", forever())


async def test_endpoint_answers_503_when_the_sampler_hangs(tokenizer) -> None:
    class Hanging:
        async def sample_async(self, **kwargs):
            await asyncio.sleep(3600)

    async with SamplingEndpoint(Hanging(), tokenizer, "tiny", timeout_s=0.2) as ep:
        client = EngineClient(EngineSettings(base_url=ep.base_url, retries=0))
        try:
            with pytest.raises(EngineUnavailableError, match="sent nothing for 0s"):
                await client.complete({"prompt": [1, 2], "max_tokens": 2})
        finally:
            await client.aclose()


def test_smollm2_is_the_folder_the_engine_converts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TACKROOM_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="tackroom model up"):
        resolve_base_model("smollm2")
    folder = tmp_path / "models" / "SmolLM2-135M-Instruct"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    assert resolve_base_model("smollm2") == resolve_base_model("HuggingFaceTB/SmolLM2-135M-Instruct") == str(folder)


async def test_stopping_the_endpoint_answers_open_samples_503_and_logs_no_traceback(tokenizer, caplog) -> None:
    """Stopping a training run used to leave uvicorn cancelling open sample requests: a CancelledError traceback
    ("Exception in ASGI application") per request in the log, and clients with a dropped connection."""
    asked = asyncio.Event()

    class Hanging:
        async def sample_async(self, **kwargs):
            asked.set()
            await asyncio.sleep(3600)

    ep = await SamplingEndpoint(Hanging(), tokenizer, "tiny", timeout_s=600).start()
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            pending = asyncio.create_task(client.post(f"{ep.base_url}/completions",
                                                      json={"prompt": [1, 2], "max_tokens": 2}))
            await asyncio.wait_for(asked.wait(), 30)
            with caplog.at_level(logging.ERROR):
                await ep.stop()
                answer = await asyncio.wait_for(pending, 30)
    finally:
        await ep.stop()
    assert answer.status_code == 503 and "sampling endpoint stopped" in answer.json()["error"]["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
