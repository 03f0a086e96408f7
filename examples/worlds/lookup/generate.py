"""Write a set of lookup tasks: answers that exist only in a world's files (a note, a CSV row, a log line, a mail,
a file to find), so an agent scores only by reading them through a tool.

    uv run python examples/worlds/lookup/generate.py --seed 1 --n 24 --out examples/worlds/lookup/train
    uv run python examples/worlds/lookup/generate.py --seed 2 --n 12 --out examples/worlds/lookup/heldout

One folder per set: ``world.toml``, ``files/`` (this set's data), ``servers/`` (the stdio MCP server) and
``tasks/<id>/`` (task.toml, instruction.md, tests/test.sh, solution/solve.sh). Another seed gives other file
names, other keys and other values; the instruction names what to find, never the value. Levels, easiest first
(a curriculum: the first names the file and the tool, the last names only a folder):

- ``read``: "the file /workspace/notes/<name>.txt holds a code" (tool: read_file);
- ``csv``: the code of one item in /workspace/inventory.csv;
- ``log``: the request id of the one ERROR line of a user in /workspace/logs/app.log;
- ``mail``: the access code in the mail from a person, in /workspace/mail/;
- ``find``: the code of a project, in one of many files under /workspace/projects/ (tools: grep, list, read).

Reward (tests/test.sh): 1 when /app/answer.txt is the value (case and surrounding space/punctuation aside), 0.5
when the value is inside an answer of at most 200 characters, 0.4 x the share of the value a near copy keeps in
order (at least 4 characters, no longer than twice the value), else 0.
"""

from __future__ import annotations

import argparse
import random
import shutil
import string
from pathlib import Path

HERE = Path(__file__).resolve().parent
LEVELS = ("read", "csv", "log", "mail", "find")
WORDS = ("falcon heron otter lynx maple cedar birch quartz cobalt amber onyx delta raven tulip badger walnut "
         "comet ember harbor meadow pepper saffron thistle willow").split()
PEOPLE = ("Ana Ruiz", "Ivo Park", "Mia Chen", "Omar Haddad", "Lena Vogel", "Raj Patel", "Sara Lind", "Tom Okafor",
          "Yuki Mori", "Zoe Brandt", "Kofi Mensah", "Ines Costa")
ITEMS = ("copper-valve steel-bolt brass-hinge rubber-seal glass-panel oak-plank nylon-strap zinc-bracket "
         "iron-gear felt-pad cork-disk tin-cap").split()
VALUE_WORDS = ("apple banana cherry lemon mango olive peach plum grape melon carrot onion garlic ginger honey "
               "butter cookie bread pizza pasta rocket planet silver golden purple orange yellow violet indigo "
               "castle bridge garden forest island valley river canyon desert glacier tiger zebra panda koala "
               "eagle parrot dolphin shark whale rabbit turtle spider monkey donkey camel piano guitar violin "
               "trumpet drum").split()
"""``--values words``: answers a 135M model can copy (the first rung of the curriculum); disjoint from WORDS,
which name the files, so no instruction holds its answer."""
ANSWER = "/app/answer.txt"
TOOLS = {"read": ["files_read_file"], "csv": ["files_read_file"], "log": ["files_read_file", "files_grep"],
         "mail": ["files_list_directory", "files_read_file"],
         "find": ["files_grep", "files_list_directory", "files_read_file"]}

WORLD_TOML = """# A lookup world (examples/worlds/lookup/generate.py, seed {seed}): files whose values the tasks ask for,
# and one stdio MCP server that reads them. Format: docs/worlds.md.
[world]
name = "lookup-{seed}"
description = "Notes, an inventory, an application log, a mailbox and project files"

[files]
source = "files"
mount = "/workspace"

[runtime]
requirements = ["mcp>=2.3,<3"]
pythonpath = ["servers"]

[[servers]]                   # a real stdio MCP server, started by the world gateway as a child process
name = "files"
command = ["python3", "-m", "lookup_mcp.files"{server_args}]
"""

TASK_TOML = """version = "1.0"
[metadata]
category = "lookup"
difficulty = "{level}"
tags = ["tool-use", "lookup", "seed-{seed}"]

[agent]
timeout_sec = 300

[verifier]
timeout_sec = 30

[environment]
cpus = 1
memory_mb = 1024

[world]                       # the world and the tools of it this task offers (read by every harness)
path = "../.."
tools_include = {tools}

[answer]                      # where a harness that ends with a text answer writes it
path = "{answer}"
"""

TEST_SH = """#!/bin/bash
# 1: /app/answer.txt is the value (case, surrounding space and punctuation aside); 0.5: the value is inside an
# answer of at most 200 characters; 0.4 x (the longest common subsequence with the value / its length) for a
# near copy no longer than twice the value that shares at least 4 characters in order with it (a guess does
# not: the value is random and never in the instruction); else 0.
expected="{value}"
norm() {{ tr -d '[:space:][:punct:]' | tr '[:lower:]' '[:upper:]'; }}
answer=$(head -c 4096 {answer} 2>/dev/null)
a=$(printf %s "$answer" | norm)
if [ "$a" = "$expected" ]; then r=1
elif [ ${{#answer}} -le 200 ] && printf %s "$answer" | tr '[:lower:]' '[:upper:]' | grep -q "$expected"; then r=0.5
elif [ -n "$a" ] && [ ${{#a}} -le $(( 2 * ${{#expected}} )) ]; then
  r=$(awk -v a="$a" -v b="$expected" 'BEGIN {{ n = length(a); m = length(b)
    for (i = 0; i <= n; i++) L[i, 0] = 0; for (j = 0; j <= m; j++) L[0, j] = 0
    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
      L[i, j] = substr(a, i, 1) == substr(b, j, 1) ? L[i-1, j-1] + 1 : (L[i-1, j] > L[i, j-1] ? L[i-1, j] : L[i, j-1])
    if (L[n, m] >= 4) printf "%.3f", 0.4 * L[n, m] / m; else print 0 }}')
else r=0; fi
mkdir -p /logs/verifier && echo $r > /logs/verifier/reward.txt
"""

SOLVE_SH = """#!/bin/bash
mkdir -p /app
echo {value} > {answer}
"""


def word(rng: random.Random, used: set[str]) -> str:
    """A fresh word of VALUE_WORDS never used before in this set."""
    left = [w for w in VALUE_WORDS if w not in used]
    if not left:
        raise SystemExit(f"--values words has {len(VALUE_WORDS)} words: ask for fewer tasks")
    value = rng.choice(left)
    used.add(value)
    return value


def code(rng: random.Random, used: set[str]) -> str:
    """A fresh 6-character value (letters and digits, at least one of each) never used before in this set."""
    while True:
        value = "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(6))
        if value not in used and any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            used.add(value)
            return value


class SetWriter:
    """The files of one set, built task by task: every task adds its own record to the shared files."""

    def __init__(self, seed: int, values: str = "codes") -> None:
        self.rng = random.Random(seed)
        self.new_value = word if values == "words" else code
        self.seed = seed
        self.used: set[str] = set()
        self.notes: dict[str, str] = {}
        self.inventory: list[tuple[str, str, int]] = []
        self.log: list[str] = []
        self.mail: dict[str, str] = {}
        self.projects: dict[str, str] = {}
        words = list(WORDS)
        self.rng.shuffle(words)
        self.words = iter(words)

    def task(self, level: str) -> tuple[str, str]:
        """(instruction, value) of a new task of ``level``."""
        value = self.new_value(self.rng, self.used)
        what = "word" if self.new_value is word else "code"
        tail = f"Answer with the {what} only, nothing else (write it to {ANSWER})."
        if level == "read":
            name = next(self.words)
            self.notes[name] = f"{value}\n"
            path = f"/workspace/notes/{name}.txt"
            return (f"The file {path} holds a {'word' if what == 'word' else 'secret code'}. Read it with the read_file tool "
                    f"(path \"{path}\"), or `cat {path}` in a shell. {tail}"), value
        if level == "csv":
            item = f"{self.rng.choice(ITEMS)}-{len(self.inventory) + 1:02d}"
            self.inventory.append((item, value, self.rng.randint(1, 500)))
            return (f"The file /workspace/inventory.csv lists items with their codes (columns item,code,qty). "
                    f"Read it and find the row of item {item}. {tail}"), value
        if level == "log":
            user = f"{self.rng.choice(PEOPLE).split()[0].lower()}_{len(self.log) + 1:02d}"
            self.log.append(f"ERROR user={user} request={value} msg=timeout")
            return (f"The log /workspace/logs/app.log has one ERROR line for user {user}. Find it (read the file or "
                    f"search it for 'user={user}') and report its request id. {tail}"), value
        if level == "mail":
            person = PEOPLE[len(self.mail) % len(PEOPLE)]
            first, last = person.split()
            name = f"{len(self.mail) + 1:03d}-{first.lower()}.txt"
            self.mail[name] = (f"From: {person} <{first.lower()}@example.com>\nSubject: access\n\n"
                               f"Hi, the access code for the {self.rng.choice(WORDS)} room is {value}.\n{first}\n")
            return (f"The folder /workspace/mail/ holds mails, one file each. The mail from {first} {last} "
                    f"gives an access code. List the folder, read that mail and report the code. {tail}"), value
        name = next(self.words)
        self.projects[f"p{self.rng.randint(1000, 9999)}-{len(self.projects)}.txt"] = (
            f"project: {name}\nowner: {self.rng.choice(PEOPLE)}\ncode: {value}\n")
        return (f"One of the files under /workspace/projects/ is about project {name}. Find that file (search for "
                f"'project: {name}') and report its code. {tail}"), value

    def write_files(self, files: Path) -> None:
        for name, text in self.notes.items():
            _write(files / "notes" / f"{name}.txt", text)
        for i in range(3):  # notes nobody asks about
            _write(files / "notes" / f"misc-{i}.txt", f"{self.new_value(self.rng, self.used)}\n")
        rows = list(self.inventory) + [(f"{self.rng.choice(ITEMS)}-x{i}", code(self.rng, self.used),
                                        self.rng.randint(1, 500)) for i in range(4)]
        self.rng.shuffle(rows)
        _write(files / "inventory.csv", "item,code,qty\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
        lines = list(self.log)
        for _ in range(max(6, 2 * len(lines))):
            user = f"{self.rng.choice(PEOPLE).split()[0].lower()}{self.rng.randint(100, 999)}"
            lines.append(f"INFO user={user} request={code(self.rng, self.used)} msg=ok")
        self.rng.shuffle(lines)
        _write(files / "logs" / "app.log",
               "".join(f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00 {line}\n" for i, line in enumerate(lines)))
        for name, text in self.mail.items():
            _write(files / "mail" / name, text)
        for name, text in self.projects.items():
            _write(files / "projects" / name, text)
        for i in range(3):
            _write(files / "projects" / f"p{self.rng.randint(1000, 9999)}-z{i}.txt",
                   f"project: archive-{i}\nowner: {self.rng.choice(PEOPLE)}\ncode: {code(self.rng, self.used)}\n")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)


def answers_of(set_dir: Path) -> set[str]:
    """The answers of an existing set (its solutions' ``echo VALUE > ...``), for ``--avoid``."""
    return {solve.read_text(encoding="utf-8").split("echo ", 1)[1].split()[0]
            for solve in set_dir.glob("tasks/*/solution/solve.sh")}


def generate(out: Path, seed: int, n: int, levels: list[str], values: str = "codes",
             avoid: set[str] = frozenset(), framed: bool = False) -> list[str]:
    """Write the set into ``out`` (replacing it); the task ids. No answer is one of ``avoid``; ``framed``: the
    server shows one-line files as a quoted value and names the next step (``lookup_mcp.files --framed``)."""
    unknown = sorted(set(levels) - set(LEVELS))
    if unknown:
        raise SystemExit(f"unknown level(s) {unknown}; levels: {', '.join(LEVELS)}")
    if out.exists():
        shutil.rmtree(out)
    writer = SetWriter(seed, values)
    writer.used.update(avoid)
    ids = []
    for i in range(n):
        level = levels[i % len(levels)]
        instruction, value = writer.task(level)
        task_id = f"{level}-{seed}-{i:02d}"
        task = out / "tasks" / task_id
        _write(task / "instruction.md", instruction + "\n")
        _write(task / "task.toml", TASK_TOML.format(level=level, seed=seed, tools=TOOLS[level], answer=ANSWER)
               .replace("'", '"'))
        _write(task / "tests" / "test.sh", TEST_SH.format(value=value.upper(), answer=ANSWER), 0o755)
        _write(task / "solution" / "solve.sh", SOLVE_SH.format(value=value, answer=ANSWER), 0o755)
        ids.append(task_id)
    writer.write_files(out / "files")
    _write(out / "world.toml", WORLD_TOML.format(seed=seed, server_args=', "--framed"' if framed else ""))
    shutil.copytree(HERE / "servers", out / "servers", ignore=shutil.ignore_patterns("__pycache__"))
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--n", type=int, default=10, help="tasks (levels taken in turn)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--levels", default=",".join(LEVELS), help=f"comma-separated, of {', '.join(LEVELS)}")
    parser.add_argument("--values", choices=["codes", "words"], default="codes",
                        help="codes: 6 random letters and digits; words: common words (the curriculum's first rung)")
    parser.add_argument("--avoid", type=Path, action="append", default=[],
                        help="a set whose answers this one must not reuse (a held-apart set: other values)")
    parser.add_argument("--framed", action="store_true",
                        help="the server quotes a one-line file's value and names the next step (a rung below plain)")
    args = parser.parse_args()
    avoid = set().union(*(answers_of(d) for d in args.avoid)) if args.avoid else set()
    ids = generate(args.out, args.seed, args.n, [x for x in args.levels.split(",") if x], args.values, avoid, args.framed)
    print(f"{len(ids)} tasks in {args.out / 'tasks'}: {', '.join(ids)}")


if __name__ == "__main__":
    main()
