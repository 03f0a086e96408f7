"""The calls a run makes on its LoRA training client, each bounded by :class:`~.server.TinkerCalls`.

The Tinker SDK's ``*_async`` methods return a future whose ``result_async()`` is the answer; every call here
awaits both inside the guard, so a server that hangs or dies ends the call with a
:class:`~.server.TinkerServerError` that names the step (``what``) and carries the server's last log lines.
"""

from __future__ import annotations

from typing import Any

from tackroom_train.tinker.server import TinkerCalls


async def _result(submitted: Any) -> Any:
    """Await a Tinker ``*_async`` call's future, then its result."""
    return await (await submitted).result_async()


def _logprobs(outputs: list[dict[str, Any]]) -> list[list[float]]:
    return [list(o["logprobs"].data) for o in outputs]


class TrainingClient:
    """A ``tinker.TrainingClient`` (a LoRA on the server) and the guard every call goes through."""

    def __init__(self, training: Any, call: TinkerCalls) -> None:
        self.training = training
        self.call = call

    @classmethod
    async def create(cls, service: Any, call: TinkerCalls, *, base_model: str, rank: int) -> TrainingClient:
        training = await call("create the LoRA training client",
                              service.create_lora_training_client_async(base_model=base_model, rank=rank))
        return cls(training, call)

    async def forward(self, data: list[Any], what: str) -> list[list[float]]:
        """The trainer's logprobs per target position of each datum (no gradient)."""
        out = await self.call(what, _result(self.training.forward_async(data, "cross_entropy")))
        return _logprobs(out.loss_fn_outputs)

    async def forward_backward(self, data: list[Any], loss_fn: str, loss_fn_config: dict[str, float] | None,
                               what: str) -> Any:
        """A built-in loss's forward-backward; its result (``loss_fn_outputs``: logprobs, elementwise loss)."""
        return await self.call(what, _result(self.training.forward_backward_async(data, loss_fn, loss_fn_config)))

    async def forward_backward_custom(self, data: list[Any], loss: Any, what: str) -> Any:
        """Tinker's custom-loss path: ``loss(data, logprobs) -> (loss, metrics)`` runs here, client-side."""
        return await self.call(what, _result(self.training.forward_backward_custom_async(data, loss)))

    async def optim_step(self, learning_rate: float, what: str) -> None:
        from tinker import types

        await self.call(what, _result(self.training.optim_step_async(types.AdamParams(learning_rate=learning_rate))))

    async def save_for_sampler(self, name: str, what: str) -> str | None:
        """Save the LoRA as a sampler checkpoint; its ``tinker://`` path (None: the server gave none)."""
        saved = await self.call(what, _result(self.training.save_weights_for_sampler_async(name=name)))
        return getattr(saved, "path", None)

    async def sampling_client(self, what: str) -> Any:
        """The current weights as a ``tinker.SamplingClient``."""
        return await self.call(what, self.training.save_weights_and_get_sampling_client_async())

    @staticmethod
    def logprobs(result: Any) -> list[list[float]]:
        """The per-target logprobs a forward-backward result carries."""
        return _logprobs(result.loss_fn_outputs)
