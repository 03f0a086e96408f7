"""Where a Tinker run's rollouts sample, behind one protocol: publish a version, pin a batch to it, check it.

Two implementations, chosen by ``[tinker] sampler``:

* :class:`EngineSampler` (``"engine"``, the default): the run's own vLLM engine with the live LoRA
  (:mod:`.engine_sampling`). Publishing saves the LoRA on the Tinker server and loads it into the engine as
  the next adapter; pinning routes every request of a batch to that adapter; checking raises
  :class:`~.pipeline.EngineSamplingError` when the engine failed a request or is gone.
* :class:`JaxSampler` (``"tinker"``): the Tinker server's own JAX sampler behind
  :class:`~.sampling_endpoint.SamplingEndpoint`. Publishing asks the server for a sampling client of the
  current weights; pinning points the endpoint at a version's client; checking raises a
  :class:`ConfigError` when a harness asked for constrained decoding, which this sampler cannot do.

Either way version 0 (the LoRA before any RL step: untrained, or the ``[sft]`` warm start) is published and pinned
when the sampler is entered, and a version is published before any batch samples with it (the pipeline's rule).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Protocol

from tackroom import ConfigError
from tackroom_train.tinker.client import TrainingClient
from tackroom_train.tinker.engine_sampling import EngineSampling
from tackroom_train.tinker.pipeline import EngineSamplingError
from tackroom_train.tinker.policy import download_archive, sampler_archive
from tackroom_train.tinker.sampling_endpoint import SamplingEndpoint, constraint_error


class Sampler(Protocol):
    """What the loop needs from wherever rollouts sample; an async context manager that serves :attr:`base_url`
    with version 0 pinned while entered."""

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible ``/v1`` URL harnesses and the gateway sample from."""
        ...

    def describe(self) -> str:
        """Where it samples, in words, for the run's first line."""
        ...

    async def publish(self, version: int) -> float:
        """Make the trainer's current weights version ``version`` of the policy; the hand-off's seconds."""
        ...

    def pin(self, version: int) -> None:
        """Every request from now on samples with ``version`` (published before)."""
        ...

    async def check(self, what: str) -> None:
        """Raise when the rollouts since the last check cannot be trained on; ``what`` names them."""
        ...

    async def __aenter__(self) -> Sampler: ...

    async def __aexit__(self, *exc: object) -> None: ...


class EngineSampler:
    """Rollouts on the run's vLLM engine with the live LoRA; each version a LoRA adapter loaded into it."""

    def __init__(self, engine: EngineSampling, client: TrainingClient, *, port: int, service: Any,
                 checkpoints: Path | None, log: Callable[[str], None]) -> None:
        self.engine = engine
        self.client = client
        self.port = port
        self.service = service
        self.checkpoints = checkpoints
        """The server's checkpoint folder when the run started it (read in place); None: download each version."""
        self.log = log

    @property
    def base_url(self) -> str:
        return self.engine.base_url

    def describe(self) -> str:
        return f"the vLLM engine (port {self.port}) with the live LoRA"

    async def publish(self, version: int) -> float:
        t0 = time.monotonic()
        path = await self.client.save_for_sampler(f"v{version}", f"save policy version {version}")
        if not path:
            raise EngineSamplingError(f"the Tinker server answered the save of version {version} with no path")
        if self.checkpoints is not None:
            archive = sampler_archive(self.checkpoints, path)
        else:
            folder = self.engine.run_dir / "lora"
            folder.mkdir(parents=True, exist_ok=True)
            archive = await download_archive(self.service, path, folder / f"v{version}.tar.gz")
        await self.engine.load(version, archive)
        return time.monotonic() - t0

    def pin(self, version: int) -> None:
        self.engine.pin(version)

    async def check(self, what: str) -> None:
        await self.engine.check(what)

    async def __aenter__(self) -> EngineSampler:
        await self.engine.__aenter__()
        try:
            handoff = await self.publish(0)
            self.log(f"policy version 0 (the LoRA before any RL step) loaded into the engine in {handoff:.1f}s")
            self.pin(0)
        except BaseException:
            await self.engine.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.engine.__aexit__(*exc)


class JaxSampler:
    """Rollouts on the Tinker server's JAX sampler; each version a sampling client of the server's."""

    def __init__(self, endpoint: SamplingEndpoint, client: TrainingClient, first: Any, *, max_staleness: int) -> None:
        self.endpoint = endpoint
        self.client = client
        self.max_staleness = max_staleness
        self.versions: dict[int, Any] = {0: first}
        """Policy version → its ``tinker.SamplingClient`` (those a batch within the staleness bound may still use)."""

    @classmethod
    async def create(cls, client: TrainingClient, tokenizer: Any, model_name: str, *, max_model_len: int | None,
                     timeout_s: float, max_staleness: int) -> JaxSampler:
        """Version 0 (the LoRA before any RL step) as a sampling client, behind a sampling endpoint."""
        first = await client.sampling_client("save weights for sampling")
        endpoint = SamplingEndpoint(first, tokenizer, model_name, max_model_len=max_model_len, timeout_s=timeout_s)
        return cls(endpoint, client, first, max_staleness=max_staleness)

    @property
    def base_url(self) -> str:
        return self.endpoint.base_url

    def describe(self) -> str:
        return "the Tinker sampler"

    async def publish(self, version: int) -> float:
        t0 = time.monotonic()
        self.versions[version] = await self.client.sampling_client(f"save weights for sampling (version {version})")
        for old in [v for v in self.versions if v < version - self.max_staleness - 1]:
            del self.versions[old]
        return time.monotonic() - t0

    def pin(self, version: int) -> None:
        self.endpoint.sampler = self.versions[version]

    async def check(self, what: str) -> None:
        if self.endpoint.refused:  # the rollouts asked for what the sampler cannot do
            raise ConfigError(constraint_error(self.endpoint.refused))

    async def __aenter__(self) -> JaxSampler:
        await self.endpoint.__aenter__()
        self.pin(0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.endpoint.__aexit__(*exc)
