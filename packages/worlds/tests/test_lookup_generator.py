"""examples/worlds/lookup/generate.py: a seed fixes a set, another seed changes every value, and no instruction
holds its answer (copying the instruction cannot score)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tackroom import load_task
from tackroom_worlds import task_world, world_files

SCRIPT = Path(__file__).resolve().parents[3] / "examples" / "worlds" / "lookup" / "generate.py"
spec = importlib.util.spec_from_file_location("lookup_generate", SCRIPT)
generate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generate)


def values(out: Path) -> dict[str, str]:
    """Each task's value, as its oracle writes it."""
    return {t.name: re.search(r"echo (\w+)", (t / "solution" / "solve.sh").read_text()).group(1)
            for t in sorted((out / "tasks").iterdir())}


def test_a_seed_fixes_the_set_and_another_seed_changes_every_value(tmp_path):
    ids = generate.generate(tmp_path / "a", seed=7, n=10, levels=list(generate.LEVELS))
    generate.generate(tmp_path / "b", seed=7, n=10, levels=list(generate.LEVELS))
    generate.generate(tmp_path / "c", seed=8, n=10, levels=list(generate.LEVELS))
    assert len(ids) == 10 and {i.split("-")[0] for i in ids} == set(generate.LEVELS)
    assert values(tmp_path / "a") == values(tmp_path / "b")
    a, c = values(tmp_path / "a"), values(tmp_path / "c")
    assert not set(a.values()) & set(c.values())
    assert len(set(a.values())) == 10
    for task_id, value in a.items():
        task = load_task(tmp_path / "a" / "tasks" / task_id)
        assert value not in task.instruction and value.lower() not in task.instruction.lower()
        assert task_world(task).tools_include == generate.TOOLS[task_id.split("-")[0]]
        files = world_files(tmp_path / "a")
        found = [p for p in files.source.rglob("*") if p.is_file() and value in p.read_text()]
        assert len(found) == 1, (task_id, found)  # the value is in the world, once


def test_the_oracle_solution_and_the_grader_agree(tmp_path):
    generate.generate(tmp_path, seed=3, n=5, levels=["read"])
    task = tmp_path / "tasks" / "read-3-00"
    value = values(tmp_path)["read-3-00"]
    assert value in (task / "solution" / "solve.sh").read_text()
    script = (task / "tests" / "test.sh").read_text().replace("/app/answer.txt", str(tmp_path / "answer.txt")) \
        .replace("/logs/verifier", str(tmp_path / "logs"))
    (tmp_path / "t.sh").write_text(script)
    near = value[:2] + value[3:]                        # one character dropped: 5 of 6 kept in order
    for answer, reward in [(f" {value.lower()}.\n", "1"), (f"The code is {value}", "0.5"),
                           (near, "0.333"), (value[:3], "0"), ("ZZZZZZ" if "Z" not in value else "QQQQQQ", "0"),
                           (near + "X" * 12, "0"), (f"{value} " + "x" * 300, "0"), ("", "0")]:
        (tmp_path / "answer.txt").write_text(answer)
        subprocess.run(["bash", str(tmp_path / "t.sh")], check=True)
        assert (tmp_path / "logs" / "reward.txt").read_text().strip() == reward, answer


def test_a_words_set_grades_the_word_in_any_case_and_its_oracle_scores_1(tmp_path):
    """The grader compares upper-cased text: a lower-case word must be upper-cased in test.sh too (it was not, and
    every answer to a words task scored 0)."""
    generate.generate(tmp_path, seed=3, n=2, levels=["read"], values="words")
    task = tmp_path / "tasks" / "read-3-00"
    word = values(tmp_path)["read-3-00"]
    assert word.isalpha() and word.islower()
    script = (task / "tests" / "test.sh").read_text().replace("/app/answer.txt", str(tmp_path / "answer.txt")) \
        .replace("/logs/verifier", str(tmp_path / "logs"))
    (tmp_path / "t.sh").write_text(script)
    solve = (task / "solution" / "solve.sh").read_text().replace("/app/answer.txt", str(tmp_path / "answer.txt"))
    subprocess.run(["bash", "-c", solve], check=True)
    subprocess.run(["bash", str(tmp_path / "t.sh")], check=True)
    assert (tmp_path / "logs" / "reward.txt").read_text().strip() == "1"
    other = values(tmp_path)["read-3-01"]
    for answer, reward in [(word, "1"), (f" {word.title()}.\n", "1"), (word.upper(), "1"),
                           (f"the word is {word}", "0.5"), (other, "0"), ("", "0")]:
        (tmp_path / "answer.txt").write_text(answer)
        subprocess.run(["bash", str(tmp_path / "t.sh")], check=True)
        assert (tmp_path / "logs" / "reward.txt").read_text().strip() == reward, answer


def test_an_unknown_level_is_refused_naming_the_levels(tmp_path):
    with pytest.raises(SystemExit, match="unknown level.*levels: read, csv, log, mail, find"):
        generate.generate(tmp_path, seed=1, n=2, levels=["read", "pdf"])
    out = subprocess.run([sys.executable, str(SCRIPT), "--seed", "1", "--n", "1", "--levels", "xls",
                          "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert out.returncode != 0 and "unknown level(s) ['xls']" in out.stderr
