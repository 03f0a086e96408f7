"""Matrix statistics against values worked out by hand and by brute force."""

from __future__ import annotations

import itertools
import random
from math import isclose

import pytest

from tackroom import TrialResult
from tackroom_app import TrialErrorInfo
from tackroom_matrix.stats import cell_stats, pass_at_k


def result(task: str, p: int, reward: float | None, *, error: str | None = None, domain: str = "d",
           metrics: dict | None = None) -> TrialResult:
    r = TrialResult(trial_id=f"{task}-{p}", task=task, harness="h", sandbox="local", verifier="v", model="m",
                    pass_index=p, reward=reward, domain=domain, category=f"{domain}-cat", metrics=metrics or {},
                    timings={"total": 2.0})
    if error is not None:
        r.error = TrialErrorInfo(error_class=error, type=f"{error.title()}Boom", phase="harness_run", message="boom")
    return r


@pytest.mark.parametrize("n, c, k, expected", [
    (1, 1, 1, 1.0),
    (1, 0, 1, 0.0),
    (5, 2, 1, 0.4),                      # c / n
    (5, 2, 2, 0.7),                      # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 4, 1.0),                      # n - c < k: some draw of 4 always contains a pass
    (10, 3, 5, 1 - 21 / 252),            # 1 - C(7,5)/C(10,5)
    (3, 1, 3, 1.0),
    (4, 1, 2, 0.5),                      # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (200, 0, 100, 0.0),
])
def test_pass_at_k_known_values(n, c, k, expected):
    assert isclose(pass_at_k(n, c, k), expected, abs_tol=1e-12)


def test_pass_at_k_equals_the_share_of_k_subsets_with_a_pass():
    rng = random.Random(1)
    for _ in range(40):
        n = rng.randint(1, 8)
        c = rng.randint(0, n)
        k = rng.randint(1, n)
        samples = [True] * c + [False] * (n - c)
        subsets = list(itertools.combinations(range(n), k))
        brute = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
        assert isclose(pass_at_k(n, c, k), brute, abs_tol=1e-12), (n, c, k)


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, -1, 1), (3, 1, 4), (3, 1, 0)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_cell_statistics_by_hand():
    # Two tasks, three passes.   pass 0   pass 1   pass 2
    #   a (domain x)              1.0      1.0      0.0
    #   b (domain y)              0.0      0.5      1.0
    rewards = {"a": [1.0, 1.0, 0.0], "b": [0.0, 0.5, 1.0]}
    results = [result(t, p, r, domain="x" if t == "a" else "y",
                      metrics={"turns": 2 + p, "tool_calls": 4, "tool_call_successes": 3})
               for t, rs in rewards.items() for p, r in enumerate(rs)]
    s = cell_stats(results, model="m", harness="h", harness_name="h", passes=3, k=2, n_planned=6)
    # per-pass pass@1: 0.5, 0.5, 0.5 -> mean 0.5, std 0
    assert s.pass_at_1 == 0.5 and s.pass_at_1_std == 0.0
    # per-pass mean reward: 0.5, 0.75, 0.5 -> mean 0.58333, sample std 0.144337...
    assert isclose(s.mean_reward, 1.75 / 3) and isclose(s.std, 0.1443375672974065)
    # task a: n=3, c=2 -> pass@2 = 1; task b: n=3, c=1 -> 1 - C(2,2)/C(3,2) = 2/3
    assert isclose(s.pass_at_k, (1 + 2 / 3) / 2) and s.k == 2
    assert isclose(s.pass_at["1"], 0.5) and s.pass_at["3"] == 1.0
    assert s.errors == {"infra": 0, "model": 0, "task": 0} and s.non_model_error_rate == 0.0
    assert isclose(s.domains["x"].pass_at_1, 2 / 3) and isclose(s.domains["y"].pass_at_1, 1 / 3)
    assert s.domains["x"].n_tasks == 1 and s.categories["y-cat"].n_trials == 3
    assert s.behaviour["turns"] == 3.0 and s.behaviour["tool_call_success_rate"] == 0.75 and s.behaviour_trials == 6
    assert s.n_trials == s.n_counted == 6 and s.n_tasks == 2 and s.mean_trial_sec == 2.0


def test_errors_by_class_and_what_counts():
    results = [
        result("a", 0, 1.0),
        result("a", 1, None, error="infra"),      # does not count
        result("b", 0, 0.0, error="model"),        # counts, as a failure
        result("b", 1, None, error="task"),        # does not count
    ]
    s = cell_stats(results, model="m", harness="h", harness_name="h", passes=2, k=2, n_planned=4)
    assert s.errors == {"infra": 1, "model": 1, "task": 1}
    assert s.non_model_errors == 2 and s.non_model_error_rate == 0.5
    assert s.n_counted == 2
    # pass 0: a passes, b fails -> 0.5; pass 1: nothing counted -> the pass is left out
    assert s.pass_at_1 == 0.5 and s.pass_at_1_std is None
    assert s.pass_at["2"] is None, "no task has two counted passes"
    assert [(e.error_class, e.count) for e in s.error_types] == [("infra", 1), ("model", 1), ("task", 1)]


def test_a_cell_whose_every_trial_errors():
    results = [result(t, p, None, error="infra") for t in "ab" for p in range(2)]
    s = cell_stats(results, model="m", harness="h", harness_name="h", passes=2, k=2, n_planned=4)
    assert s.pass_at_1 is None and s.pass_at_k is None and s.mean_reward is None and s.std is None
    assert s.errors["infra"] == 4 and s.non_model_error_rate == 1.0 and s.n_counted == 0
    assert s.domains == {} and s.error_types[0].type == "InfraBoom" and s.error_types[0].count == 4

    model_failures = [result(t, p, 0.0, error="model") for t in "ab" for p in range(2)]
    m = cell_stats(model_failures, model="m", harness="h", harness_name="h", passes=2, k=2, n_planned=4)
    assert m.pass_at_1 == 0.0 and m.pass_at_k == 0.0 and m.non_model_error_rate == 0.0


def test_an_unreachable_cell_counts_its_missing_trials_as_infra_errors():
    earlier = [result("a", 0, 1.0)]
    s = cell_stats(earlier, model="m", harness="h", harness_name="h", passes=2, k=1, n_planned=4,
                   status="unreachable", status_detail="http://127.0.0.1:1/v1 is not reachable")
    assert s.status == "unreachable" and s.n_trials == 1 and s.n_planned == 4
    assert s.errors["infra"] == 3 and s.non_model_error_rate == 0.75
    unreachable = next(e for e in s.error_types if e.type == "EndpointUnreachableError")
    assert unreachable.count == 3 and "not reachable" in unreachable.message and unreachable.phase == "preflight"
    assert s.pass_at_1 == 1.0, "the trial an earlier run finished still counts"


def test_passes_beyond_the_configured_number_are_ignored_and_threshold_applies():
    results = [result("a", 0, 0.8), result("a", 1, 0.4), result("a", 5, 1.0)]
    s = cell_stats(results, model="m", harness="h", harness_name="h", passes=2, k=2, n_planned=2,
                   pass_threshold=0.75)
    assert s.pass_at_1 == 0.5 and s.pass_at_k == 1.0 and isclose(s.mean_reward, 0.6)
