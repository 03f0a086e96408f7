"""A train config resolved once into the plan every part of ``tackroom train`` reads.

:func:`resolve_plan` is the one reader of ``[loss]``: the spec by name (an unknown name lists the installed
losses), its options validated, and the aggregation in effect, by one rule for both backends and the arms table:

1. ``[loss] aggregation`` when set;
2. else the options' ``aggregation`` field (``[loss.options] aggregation``, or that field's default) when the
   loss's ``Options`` has one;
3. else the ``LossSpec``'s ``aggregation``.

The options then carry the aggregation in effect, so the loss reads what the trainer applies. The plan also holds
the task rows (read once), ``[sft]``'s demonstrations (read and checked once, :mod:`tackroom_train.sft`),
``[model] init_from``'s policy folder, the backend, and the sections each part of a run takes: the loop's functions
take the plan and their own two or three parts, never the config whole. How a loss runs on a backend is the loss's own
declaration (``LossSpec.mappings``), read through :meth:`LossPlan.mapped`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tackroom import Aggregation, ConfigError, LossSpec, PluginOptions
from tackroom_app import Endpoint, PluginSelection, instantiate
from tackroom_train.config import GpuSplit, LossSelection, ModelSection, RolloutRules, TrainConfig, TrainKnobs
from tackroom_train.config_mix import MixedHarness
from tackroom_train.config_tinker import TinkerSettings
from tackroom_train.dataset import mixed_rows, prompt_rows
from tackroom_train.mismatch import mismatch_threshold
from tackroom_train.sft import SftPlan, resolve_sft


class LossMappingError(ConfigError):
    """The selected loss declares no mapping for the backend that is to train it."""


class LossPlan(BaseModel):
    """``[loss]`` resolved: the spec, its validated options, and the aggregation in effect."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    spec: LossSpec
    options: PluginOptions
    aggregation: Aggregation

    @property
    def name(self) -> str:
        return self.spec.name

    def describe(self) -> str:
        return f"{self.name}, {self.aggregation}"

    def declares(self, backend: str) -> bool:
        """Whether the loss declares a mapping for ``backend`` (``LossSpec.mappings``)."""
        return backend in self.spec.mappings

    def mapped(self, backend: str, *, expected: str, otherwise: str) -> Any:
        """The loss's mapping for ``backend`` called with its options. Without one, a :class:`LossMappingError`
        naming the loss, the backend, what the mapping would return (``expected``) and what to set instead
        (``otherwise``)."""
        mapping = self.spec.mapping(backend)
        if mapping is None:
            raise LossMappingError(
                f"loss.name: loss {self.name!r} declares no mapping for the {backend} backend "
                f"(LossSpec.mappings[{backend!r}]: {expected}); {otherwise}")
        return mapping(self.options)


def resolve_loss(selection: LossSelection, manager: Any = None) -> LossPlan:
    """``[loss]`` as a :class:`LossPlan`, by the module docstring's aggregation rule."""
    spec, options = instantiate("loss", PluginSelection(name=selection.name, **selection.options), where="loss",
                                manager=manager)
    aggregation = selection.aggregation or getattr(options, "aggregation", None) or spec.aggregation
    if "aggregation" in type(options).model_fields and options.aggregation != aggregation:
        options = options.model_copy(update={"aggregation": aggregation})
    return LossPlan(spec=spec, options=options, aggregation=aggregation)


class RolloutSide(BaseModel):
    """What a rollout needs (:class:`~tackroom_train.generator.TackroomGenerator`'s part of the plan): the trial's
    plugins, the policy endpoint, the model's names and the rollout rules. The sections are the config's own
    objects, not copies."""

    model_config = ConfigDict(frozen=True)

    harness: PluginSelection
    """The one harness of a single-harness run (unused when :attr:`harnesses` is set)."""
    harnesses: list[MixedHarness] = []
    """``[[harnesses]]``: the mix, each prompt row run under the one its ``harness`` label names (empty: one
    harness)."""
    sandbox: PluginSelection
    verifier: PluginSelection
    policy: Endpoint
    model: ModelSection
    rollout: RolloutRules

    @classmethod
    def of(cls, config: TrainConfig) -> RolloutSide:
        return cls(harness=config.harness, harnesses=config.harnesses, sandbox=config.sandbox,
                   verifier=config.verifier, policy=config.policy, model=config.model, rollout=config.rollout)

    @property
    def harness_labels(self) -> list[str]:
        """The mix's labels in config order (empty: one harness)."""
        return [h.row_label for h in self.harnesses]

    def harness_selections(self) -> dict[str | None, PluginSelection]:
        """Each harness by the label a prompt row names it with: the mix's labels, or ``None`` for the one
        ``[harness]`` (a row of a single-harness run names none)."""
        if not self.harnesses:
            return {None: self.harness}
        return {h.row_label: h.selection() for h in self.harnesses}

    @property
    def served_name(self) -> str | None:
        """The policy's name at the inference endpoint, when the config gives one."""
        return self.model.served_name or self.policy.served_name


class TrainPlan(BaseModel):
    """A train config resolved once (:func:`resolve_plan`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    backend: Literal["skyrl", "tinker"]
    loss: LossPlan
    model: ModelSection
    rows: list[dict[str, Any]]
    """The prompt rows, one per task (:func:`~tackroom_train.dataset.prompt_rows`), or per task × harness × copy
    with ``[[harnesses]]`` (:func:`~tackroom_train.dataset.mixed_rows`); empty only for a run that trains an
    ``[sft]`` warm start alone (``then_rl = false``)."""
    rollout: RolloutSide
    train: TrainKnobs
    """``[train]``, its ``logprob_mismatch_warn`` the threshold in effect on this backend."""
    gpus: GpuSplit
    tinker: TinkerSettings
    skyrl: dict[str, Any]
    """``[skyrl]``: raw SkyRL overrides by dotted path, applied last."""
    record: dict[str, Any]
    """The config as a run records it with its trackers (W&B's config, MLflow's params): JSON, secrets masked,
    without ``[[arms]]`` and ``[eval]``."""
    sft: SftPlan | None = None
    """``[sft]`` resolved: the demonstrations read and checked once (:func:`~tackroom_train.sft.resolve_sft`)."""
    start_from: Path | None = None
    """``[model] init_from`` resolved to the policy folder the run's weights start from (None: ``[model] path``)."""

    @property
    def rl(self) -> bool:
        """Whether the run trains RL (every run but an ``[sft]`` warm start alone)."""
        return self.sft is None or self.sft.then_rl

    def describe_rows(self) -> str:
        """The prompt rows in words: ``N tasks``, or for a mix ``N rows (T tasks × harnesses a, b ×2)``."""
        if not self.rollout.harnesses:
            return f"{len(self.rows)} tasks"
        tasks = len({row["task_id"] for row in self.rows})
        mix = ", ".join(h.row_label + (f" ×{h.weight}" if h.weight > 1 else "") for h in self.rollout.harnesses)
        return f"{len(self.rows)} rows ({tasks} tasks × harnesses {mix})"


def check_harnesses(harnesses: list[MixedHarness], manager: Any = None) -> None:
    """Every ``[[harnesses]]`` row's name and options against the installed plugins, as ``[harness]``'s are
    checked: an unknown name lists the installed harnesses, a wrong option the valid ones."""
    for i, row in enumerate(harnesses):
        instantiate("harness", row.selection(), where=f"harnesses[{i}]", manager=manager)


def resolve_init_from(init_from: str) -> Path:
    """``[model] init_from`` as the policy folder it names: ``<run>/policy`` of a run folder, or a policy folder
    (an HF model folder: ``config.json``) itself."""
    given = Path(init_from)
    for folder in (given / "policy", given):
        if (folder / "config.json").is_file():
            return folder.resolve()
    raise ConfigError(f"model.init_from: {given} holds no policy: neither {given / 'policy'} (the trained policy a "
                      f"tackroom train run writes; see its summary.json's policy_error) nor {given} itself has a "
                      "config.json; name the earlier run's folder, or its policy folder")


def resolve_plan(config: TrainConfig, *, backend: Literal["skyrl", "tinker"] | None = None,
                 manager: Any = None) -> TrainPlan:
    """``config`` resolved for ``backend`` (default: the config's): the loss, the task rows and the mismatch
    threshold in effect, which is written back into ``config`` so the summary, the log and whoever holds the
    config agree. Unknown names and unloadable tasks are :class:`ConfigError` s here, before anything starts."""
    backend = backend or config.backend
    loss = resolve_loss(config.loss, manager)
    check_harnesses(config.harnesses, manager)
    on_engine = backend == "tinker" and config.tinker.sampler == "engine"
    config.train.logprob_mismatch_warn = mismatch_threshold(config.train, on_engine=on_engine)
    start_from = None
    if config.model.init_from is not None:
        if config.tinker.base_model is not None and backend == "tinker":
            raise ConfigError("model.init_from and tinker.base_model both name the weights the run starts from; "
                              "keep one")
        start_from = resolve_init_from(config.model.init_from)
    sft = None
    if config.sft is not None:
        sft = resolve_sft(config.sft, tokenizer=config.model.tokenizer or config.model.path)
    rows: list[dict[str, Any]] = []
    if not config.sft_only:
        sandbox = instantiate("sandbox", config.sandbox, where="sandbox", manager=manager)
        rows = prompt_rows(config.tasks, config.include, config.exclude, sandbox=sandbox,
                           network=config.rollout.network)
        if config.harnesses:
            rows = mixed_rows(rows, config.harnesses)
    return TrainPlan(backend=backend, loss=loss, model=config.model, rows=rows, rollout=RolloutSide.of(config),
                     train=config.train, gpus=config.gpus, tinker=config.tinker, skyrl=config.skyrl,
                     record=config.model_dump(mode="json", exclude={"arms", "eval"}), sft=sft,
                     start_from=start_from)
