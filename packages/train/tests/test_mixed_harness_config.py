"""``[[harnesses]]``: a train config that trains on a mix of harnesses. Its refusals (both sections, a wrong option or
name in one row, two rows with one label), the prompt rows it makes (tasks × harnesses × weight, each row naming
its harness and group), and what else reads the harness: the SkyRL mapping, the arms, the ``[eval]`` default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tackroom import ConfigError
from tackroom_app import PluginNotFoundError
from tackroom_train.arms import arm_configs
from tackroom_train.config import TrainConfig, load_train_config
from tackroom_train.dataset import write_prompt_dataset
from tackroom_train.evaluation import eval_harnesses
from tackroom_train.plan import check_harnesses, resolve_plan
from tackroom_train.skyrl_config import build_skyrl_config, skyrl_overrides

ROOT = Path(__file__).resolve().parents[3]
TASKS = ROOT / "examples" / "train" / "overfit-tasks"

MIX = f"""
tasks = ["{TASKS}"]
backend = "tinker"
[[harnesses]]
name = "answer"
system = "Answer with one word only."
max_tokens = 16
[[harnesses]]
name = "archipelago"
label = "arch"
weight = 2
options = {{ tool_choice = "auto", max_steps = 3 }}
[sandbox]
name = "local"
[verifier]
name = "test-script"
[model]
path = "smollm2"
[train]
mini_batch_size = 3
samples_per_prompt = 4
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.toml"
    path.write_text(text)
    return path


def test_a_mix_makes_one_row_per_task_harness_and_copy(tmp_path: Path) -> None:
    config = load_train_config(write(tmp_path, MIX))
    assert config.mixed and [h.row_label for h in config.harnesses] == ["answer", "arch"]
    assert config.harnesses[1].options == {"tool_choice": "auto", "max_steps": 3}  # label and weight are not options
    plan = resolve_plan(config)
    assert len(plan.rows) == 3 * (1 + 2)
    by_task: dict[str, list[tuple[str, str]]] = {}
    for row in plan.rows:
        by_task.setdefault(row["task_id"], []).append((row["harness"], row["group"]))
    assert by_task["say-blue"] == [("answer", "say-blue@answer"), ("arch", "say-blue@arch"),
                                   ("arch", "say-blue@arch#2")]
    assert len({row["group"] for row in plan.rows}) == len(plan.rows), "each row its own group"
    assert plan.rollout.harness_labels == ["answer", "arch"]
    assert plan.describe_rows() == "9 rows (3 tasks × harnesses answer, arch ×2)"
    assert "harness" not in plan.record and plan.record["harnesses"][1]["label"] == "arch"

    # the dataset SkyRL reads: every column but prompt and env_class reaches the generator as env_extras
    rows = [json.loads(line) for line in write_prompt_dataset(plan.rows, tmp_path / "p.jsonl").read_text().splitlines()]
    assert {k for r in rows for k in r} == {"prompt", "env_class", "task_id", "task_path", "harness", "group"}


def test_one_harness_keeps_its_rows_and_the_default_harness(tmp_path: Path) -> None:
    text = MIX.split("[[harnesses]]")[0] + "[sandbox]" + MIX.split("[sandbox]")[1]
    config = load_train_config(write(tmp_path, text))
    assert not config.mixed and config.harness.name == "archipelago"  # neither section: the default, as before
    plan = resolve_plan(config)
    assert [set(r) for r in plan.rows] == [{"prompt", "env_class", "task_id", "task_path"}] * 3
    assert plan.rollout.harness_selections() == {None: config.harness} and plan.describe_rows() == "3 tasks"


def test_harness_and_harnesses_together_are_refused_naming_both(tmp_path: Path) -> None:
    text = MIX.replace("[[harnesses]]\nname = \"answer\"", "[harness]\nname = \"answer\"\n[[harnesses]]\nname = \"nop\"", 1)
    with pytest.raises(ConfigError, match=r"\[harness\] and \[\[harnesses\]\] are both set.*keep one"):
        load_train_config(write(tmp_path, text))


def test_a_wrong_option_in_one_harness_lists_the_valid_ones_before_anything_starts(tmp_path: Path) -> None:
    config = load_train_config(write(tmp_path, MIX.replace("max_steps = 3", "max_step = 3")))
    with pytest.raises(ConfigError) as caught:
        resolve_plan(config)
    message = str(caught.value)
    assert message.startswith("harnesses[1].max_step: unknown field")
    assert "valid fields of harnesses[1]: " in message and "max_steps" in message and "tool_choice" in message


def test_an_unknown_harness_name_lists_the_installed_ones(tmp_path: Path) -> None:
    config = load_train_config(write(tmp_path, MIX.replace('name = "answer"', 'name = "answr"')))
    with pytest.raises(PluginNotFoundError, match=r"harnesses\[0\]\.name: no harness named 'answr' is installed; "
                                                  r"installed harnesses: .*answer, archipelago"):
        resolve_plan(config)


@pytest.mark.parametrize(("change", "expected"), [
    # the label defaults to the name: the same harness twice needs labels
    (('label = "arch"', 'label = "answer"'), r"harnesses\[1\]\.label: 'answer' is already harnesses\[0\]'s label"),
    (('name = "archipelago"\nlabel = "arch"', 'name = "answer"\nlabel = ""'),
     r"harnesses\[1\]\.label: 'answer' is already harnesses\[0\]'s label"),
    (('label = "arch"', 'label = "mean"'), r"harnesses\[1\]: label 'mean' is reserved"),
    (('label = "arch"', 'label = "my arch"'), r"harnesses\[1\]: label 'my arch' must be a plain name"),
    (("weight = 2", "weight = 0"), r"harnesses\[1\]\.weight: Input should be greater than or equal to 1"),
])
def test_labels_are_unique_plain_and_weights_whole(tmp_path: Path, change: tuple[str, str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_train_config(write(tmp_path, MIX.replace(*change)))


def test_two_rows_of_one_harness_with_their_own_labels(tmp_path: Path) -> None:
    text = MIX.replace('name = "archipelago"\nlabel = "arch"', 'name = "answer"\nlabel = "answer-terse"').replace(
        'options = { tool_choice = "auto", max_steps = 3 }', 'options = { max_tokens = 4 }')
    plan = resolve_plan(load_train_config(write(tmp_path, text)))
    assert {label: s.name for label, s in plan.rollout.harness_selections().items()} == {
        "answer": "answer", "answer-terse": "answer"}
    assert plan.rollout.harness_selections()["answer-terse"].options == {"max_tokens": 4}


def test_the_skyrl_mapping_takes_the_rows_as_prompts(tmp_path: Path) -> None:
    config = load_train_config(write(tmp_path, MIX.replace('backend = "tinker"', 'backend = "skyrl"')))
    plan = resolve_plan(config)
    dataset = write_prompt_dataset(plan.rows, tmp_path / "prompts.jsonl")
    cfg = build_skyrl_config(skyrl_overrides(plan, dataset_path=dataset, run_dir=tmp_path))
    # a prompt row is one group of samples_per_prompt trials on SkyRL (its uid is the row): one task, one harness
    assert cfg.trainer.train_batch_size == 3 and cfg.generator.n_samples_per_prompt == 4
    assert cfg.data.train_data == [str(dataset)]


def test_an_arm_of_a_mix_changes_its_loss_but_not_a_harness(tmp_path: Path) -> None:
    arms = MIX + '[[arms]]\nlabel = "prompt"\nloss = { aggregation = "prompt_mean" }\n'
    config = load_train_config(write(tmp_path, arms))
    ((_, arm),) = arm_configs(config)  # rebuilt from the config's dump: the unused [harness] is not in it
    assert arm.mixed and arm.harnesses == config.harnesses and arm.loss.aggregation == "prompt_mean"
    nudged = load_train_config(write(tmp_path, MIX + '[[arms]]\nlabel = "n"\nnudge = false\n'))
    with pytest.raises(ConfigError, match=r"arms\[0\] \(n\): harness and nudge change the one \[harness\]"):
        arm_configs(nudged)


def test_eval_defaults_to_every_harness_of_the_mix(tmp_path: Path) -> None:
    config = load_train_config(write(tmp_path, MIX + "[eval]\npasses = 1\n"))
    assert eval_harnesses(config) == [
        {"name": "answer", "label": "answer", "options": {"system": "Answer with one word only.", "max_tokens": 16}},
        {"name": "archipelago", "label": "arch", "options": {"tool_choice": "auto", "max_steps": 3}}]
    named = load_train_config(write(tmp_path, MIX + '[eval]\n[[eval.harnesses]]\nname = "terminus"\n'))
    assert eval_harnesses(named) == [{"name": "terminus", "options": {}}]  # the config names others: those
    single = TrainConfig.model_validate({"tasks": ["t"], "model": {"path": "m"}, "harness": {"name": "answer"}})
    assert eval_harnesses(single) == [{"name": "answer", "options": {}}]


def test_the_lookup_mix_example_parses_and_its_harnesses_resolve() -> None:
    config = load_train_config(ROOT / "examples" / "train" / "lookup-mix.toml")
    check_harnesses(config.harnesses)  # each row's options against the installed archipelago and terminus
    assert [h.row_label for h in config.harnesses] == ["archipelago", "terminus"]
    assert config.harnesses[0].options["tool_choice"] == "required" and config.harnesses[1].options["max_turns"] == 4
    assert config.sft is not None and config.sft.then_rl
    assert config.sft.dataset == str(ROOT / "runs" / "collect" / "lookup-warm" / "mix.jsonl")
    assert [Path(t) for t in config.tasks] == [ROOT / "examples" / "worlds" / "lookup" / "train-warm" / "tasks"]
    assert [row["label"] for row in eval_harnesses(config)] == ["archipelago", "terminus"]
