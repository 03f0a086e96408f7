"""``[sft]`` on the skyrl backend: SkyRL 0.4's own SFT trainer (``skyrl.train.sft_trainer.SFTTrainer``, started as
``python -m skyrl.train.main_sft``), then RL from the weights it exports.

SkyRL's SFT reads *pretokenized* datasets (``SFTConfig.pretokenized_dataset_paths``: JSONL rows of ``input_ids`` and a
full-sequence 0/1 ``loss_mask``), which is what a demonstration is; the plan's rows (checked, cut to ``max_length``,
:mod:`tackroom_train.sft`) are written as ``<run>/sft/train.jsonl`` and, when some are held out, ``<run>/sft/
eval.jsonl`` (SkyRL's ``eval_pretokenized_dataset_paths``, measured before training and at its end). Its loss is the
same as the tinker backend's: cross-entropy on the mask-1 tokens, normalised by the batch's trained tokens
(SkyRL's ``DefaultCollator``: ``token_mean``). What maps where (:func:`sft_overrides`):

| ``[sft]`` / the run | SkyRL ``SFTConfig`` |
|---|---|
| the rows | ``pretokenized_dataset_paths``, ``eval_pretokenized_dataset_paths`` + ``eval_before_train`` |
| ``epochs``, ``batch_size``, ``learning_rate``, ``max_length`` | ``num_epochs``, ``batch_size``, ``optimizer_config.lr``, ``max_length`` |
| ``[model] path`` (or ``init_from``'s folder) | ``model.path`` |
| ``[train] strategy``, ``seed``, ``run_name``, the tracker | ``strategy``, ``seed``, ``run_name`` + ``-sft``, ``logger`` |
| ``[gpus] nodes``, ``train`` | ``placement.num_nodes``, ``placement.num_gpus_per_node`` |
| the warm weights | ``hf_save_interval`` = its step count, ``export_path`` = ``<run>/sft/export``: one HF export, at the end, in ``<run>/sft/export/global_step_<N>/policy`` |
| ``[sft.skyrl]`` | any other field, by dotted path, applied last |

With ``then_rl`` the RL phase's ``trainer.policy.model.path`` is that export; without, the run stops after it and
``<run>/policy`` links to it, so ``[model] init_from = "<run>"`` starts a later run there as on the tinker backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tackroom import ConfigError, TackroomError
from tackroom_train.plan import TrainPlan
from tackroom_train.sft import SftPlan, write_pretokenized
from tackroom_train.skyrl_config import skyrl_logger

MICRO_BATCH_DEFAULT = 2
"""SkyRL's ``SFTConfig.micro_train_batch_size_per_gpu`` default."""


class SftRunError(TackroomError):
    """SkyRL's SFT trainer exited with an error."""


def sft_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "sft"


def sft_policy_dir(sft: SftPlan, run_dir: str | Path) -> Path:
    """Where SkyRL's SFT trainer exports the warm weights (its last step's HF folder)."""
    return sft_dir(run_dir) / "export" / f"global_step_{sft.steps_total}" / "policy"


def sft_overrides(plan: TrainPlan, run_dir: str | Path) -> dict[str, Any]:
    """SkyRL's ``SFTConfig`` for the plan's warm start, by dotted path (see the module docstring)."""
    sft, t, g = plan.sft, plan.train, plan.gpus
    assert sft is not None
    folder = sft_dir(run_dir)
    o: dict[str, Any] = {
        "strategy": t.strategy,
        "model.path": str(plan.start_from or plan.model.path),
        "pretokenized_dataset_paths": [str(folder / "train.jsonl")],
        "num_epochs": sft.settings.epochs,
        "batch_size": sft.settings.batch_size,
        "optimizer_config.lr": sft.settings.learning_rate,
        "max_length": sft.settings.max_length,
        "placement.num_nodes": g.nodes,
        "placement.num_gpus_per_node": g.train // g.nodes,
        "seed": t.seed,
        "sampler": "random",
        "logger": skyrl_logger(t),
        "project_name": "tackroom",
        "run_name": f"{t.run_name}-sft",
        "hf_save_interval": sft.steps_total,
        "export_path": str(folder / "export"),
    }
    if sft.held_out:
        o |= {"eval_pretokenized_dataset_paths": [str(folder / "eval.jsonl")], "eval_dataset_names": ["held_out"],
              "eval_before_train": True}
    o.update(sft.settings.skyrl)
    _check_batch(o)
    return o


def _check_batch(o: dict[str, Any]) -> None:
    """SkyRL's FSDP SFT splits a batch evenly over every GPU, in micro-batches: refuse a batch_size it would refuse
    after Ray and the workers started."""
    if o["strategy"] != "fsdp" or o.get("use_sequence_packing"):
        return
    gpus = o["placement.num_nodes"] * o["placement.num_gpus_per_node"]
    micro = o.get("micro_train_batch_size_per_gpu", MICRO_BATCH_DEFAULT)
    if o["batch_size"] % (gpus * micro):
        raise ConfigError(f"sft.batch_size = {o['batch_size']}: SkyRL's FSDP SFT needs a multiple of the training "
                          f"GPUs × micro_train_batch_size_per_gpu ({gpus} × {micro} = {gpus * micro}); change "
                          "batch_size, or set [sft.skyrl] micro_train_batch_size_per_gpu")


def build_sft_config(overrides: dict[str, Any]) -> Any:
    """SkyRL's typed, validated ``SFTConfig`` from the overrides; a bad path or value becomes a :class:`ConfigError`."""
    from skyrl.train.config.sft_config import SFTConfig, validate_sft_cfg

    try:
        cfg = SFTConfig.from_cli_overrides(dict(overrides))
        validate_sft_cfg(cfg)
    except ImportError:
        raise
    except Exception as exc:  # SkyRL raises ValueError/omegaconf errors for a bad path or type
        raise ConfigError(f"SkyRL rejected the mapped SFT config ([sft] or [sft.skyrl]): {exc}") from exc
    return cfg


def sft_command(overrides: dict[str, Any]) -> list[str]:
    """``python -m skyrl.train.main_sft key=value ...``: SkyRL's SFT entry point in a process of its own (its Ray
    cluster and GPU memory are gone when it exits, before the RL phase starts its own)."""
    from skyrl.train.config.config import overrides_dict_to_dotlist

    return [sys.executable, "-m", "skyrl.train.main_sft", *overrides_dict_to_dotlist(dict(overrides))]


def run_sft(plan: TrainPlan, overrides: dict[str, Any], run_dir: Path) -> Path:
    """Write the rows, run SkyRL's SFT trainer (blocks; GPU nodes only) and return the warm policy folder; without
    ``then_rl`` ``<run>/policy`` links to it."""
    sft = plan.sft
    assert sft is not None
    build_sft_config(overrides)  # refuse before the rows are written and Ray starts
    write_pretokenized(sft.train, sft_dir(run_dir) / "train.jsonl")
    if sft.held_out:
        write_pretokenized(sft.held_out, sft_dir(run_dir) / "eval.jsonl")
    log = sft_dir(run_dir) / "sft.log"
    with log.open("ab") as fh:
        code = subprocess.run(sft_command(overrides), stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ)).returncode
    policy = sft_policy_dir(sft, run_dir)
    if code != 0 or not (policy / "config.json").is_file():
        raise SftRunError(f"SkyRL's SFT trainer exited with {code} and wrote no policy at {policy}; see {log}")
    if not sft.then_rl:
        link = Path(run_dir) / "policy"
        link.unlink(missing_ok=True)
        link.symlink_to(policy.relative_to(Path(run_dir)))
    return policy
