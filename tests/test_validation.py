"""Scenarios reduced to textbook systems agree with the closed forms (docs/validation.md).

Statistical checks compare the theory with mean +- 4 standard errors of 10 independent
replications; each such check is paired with a test that a deliberately wrong theory lies
outside the same interval, so the check can fail.
"""

from __future__ import annotations

import math
from itertools import permutations

import numpy as np
import pytest

from devkit import validation as v

# ---- the formulas themselves -------------------------------------------------------------


def test_erlang_b_and_c_textbook_values():
    """Erlang B(2, 1) = 0.2 and C(2, 1) = 1/3; E[wait] = C / (c mu - lambda)."""
    assert v.erlang_b(2, 1.0) == pytest.approx(0.2)
    p_wait, wait = v.erlang_c(2, 1.0)
    assert p_wait == pytest.approx(1 / 3)
    assert wait == pytest.approx(1 / 3)
    assert v.erlang_c(3, 3.0) == (1.0, math.inf)  # unstable


def test_erlang_a_limits():
    """Erlang A tends to Erlang C as theta -> 0 and is M/M/inf when theta = mu."""
    c, lam = 5, 3.5
    p_wait, p_ab, wait = v.erlang_a(c, lam, 1.0, 1e-9)
    assert (p_wait, wait) == pytest.approx(v.erlang_c(c, lam), rel=1e-6)
    assert p_ab < 1e-8
    p_wait, p_ab, wait = v.erlang_a(c, lam, 1.0, 1.0)
    assert p_wait == pytest.approx(1 - v.poisson_cdf(c - 1, lam))  # P(Poisson(a) >= c)
    assert p_ab == pytest.approx(wait)  # theta = 1: P(abandon) = theta E[wait]


def test_base_stock_closed_form_matches_quadrature():
    """The Poisson-cdf sums equal the integrals over the position u in the period."""
    S, lam, lead = 14, 4.0, 2
    u = (np.arange(4000) + 0.5) / 4000
    fill, on_hand = [], []
    for x in u:
        m = lam * (lead + x)
        fill.append(v.poisson_cdf(S - 1, m))
        on_hand.append(sum(v.poisson_cdf(j, m) for j in range(S)))  # E[(S - N)^+]
    theory = v.base_stock(S, lam, lead)
    assert theory["fill_rate"] == pytest.approx(np.mean(fill), rel=1e-6)
    assert theory["on_hand"] == pytest.approx(np.mean(on_hand), rel=1e-6)


def test_wspt_is_optimal_by_brute_force():
    """Smith's rule: WSPT order minimises total weighted completion time (n = 6)."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, w = rng.uniform(1, 10, 6).tolist(), rng.choice([1.0, 2.0, 4.0], 6).tolist()
        best = min(v.weighted_completion(o, p, w) for o in permutations(range(6)))
        assert v.weighted_completion(v.wspt_order(p, w), p, w) == pytest.approx(best)


# ---- loadbalance: one pool ------------------------------------------------------------------


@pytest.fixture(scope="module")
def erlang_c_runs():
    return v.replicate(v.loadbalance_run, v.ERLANG_C)


@pytest.fixture(scope="module")
def erlang_a_runs():
    return v.replicate(v.loadbalance_run, v.ERLANG_A)


def estimates(runs: list[dict], config: dict) -> dict[str, v.Estimate]:
    out = {q: v.estimate(r[q] for r in runs) for q in ("p_wait", "p_abandon", "mean_wait")}
    out["arrival_rate"] = v.estimate(r["arrivals"] / config["horizon"] for r in runs)
    return out


def assert_covers(est: dict[str, v.Estimate], theory: dict[str, float]) -> None:
    for q, value in theory.items():
        assert est[q].covers(value, v.K), (q, value, str(est[q]))


def test_loadbalance_one_pool_is_erlang_c(erlang_c_runs):
    """One pool, c = 5, rho = 0.7, no waiting-room limit, no patience: M/M/5 (Erlang C)."""
    for r in erlang_c_runs:
        assert r["blocked"] == 0 and r["abandoned"] == 0
    assert_covers(estimates(erlang_c_runs, v.ERLANG_C), v.loadbalance_theory(v.ERLANG_C))


def test_loadbalance_erlang_c_check_rejects_c_minus_1_servers(erlang_c_runs):
    """The same data reject Erlang C computed with 4 servers instead of 5."""
    est = estimates(erlang_c_runs, v.ERLANG_C)
    wrong = v.loadbalance_theory(v.ERLANG_C, servers=v.ERLANG_C["servers"] - 1)
    assert not est["p_wait"].covers(wrong["p_wait"], v.K)
    assert not est["mean_wait"].covers(wrong["mean_wait"], v.K)


def test_loadbalance_one_pool_with_patience_is_erlang_a(erlang_a_runs):
    """One pool, c = 5, offered load 1.0, exponential patience of mean 2: M/M/5+M (Erlang A)."""
    for r in erlang_a_runs:
        assert r["blocked"] == 0
    assert_covers(estimates(erlang_a_runs, v.ERLANG_A), v.loadbalance_theory(v.ERLANG_A))


def test_loadbalance_erlang_a_check_rejects_c_minus_1_servers(erlang_a_runs):
    """The same data reject Erlang A computed with 4 servers instead of 5."""
    est = estimates(erlang_a_runs, v.ERLANG_A)
    wrong = v.loadbalance_theory(v.ERLANG_A, servers=v.ERLANG_A["servers"] - 1)
    for q in ("p_wait", "p_abandon", "mean_wait"):
        assert not est[q].covers(wrong[q], v.K), q


def test_loadbalance_littles_law():
    """L = lambda W for the queue and for the system, empty start to empty end, from the
    model's counters (``total_wait``, ``in_system``, ``arrivals``, ``abandoned``)."""
    r = v.loadbalance_run(0, **v.LITTLE)
    T, lam = r["time"], r["arrivals"] / r["time"]
    assert r["served"] + r["abandoned"] == r["arrivals"] and r["blocked"] == 0
    assert r["abandoned_seen"] == r["abandoned"]  # every abandonment left the queue
    assert r["in_system_mismatches"] == 0  # in_system == waiting + in service after each event
    L_queue, W_queue = r["queue_area"] / T, r["total_wait"] / r["arrivals"]
    assert L_queue == pytest.approx(lam * W_queue, rel=1e-9)
    L, W = r["system_area"] / T, r["total_sojourn"] / r["arrivals"]
    assert L == pytest.approx(lam * W, rel=1e-9)
    # it can fail: the mean wait over the served requests only (abandoning ones left out of
    # the count) breaks it
    assert r["abandoned"] > 0
    assert L_queue != pytest.approx(lam * r["total_wait"] / r["served"], rel=1e-3)


# ---- elevator and ridehail: Little's law -----------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_elevator_littles_law(seed):
    """Waiting: integral of ``model.waiting`` = ``total_wait``; in the building (waiting or
    riding): integral of ``waiting + sum(load)`` = ``total_journey`` (empty to empty)."""
    r = v.elevator_little(seed, preset="small")
    assert r["delivered"] == r["arrived"] > 0
    T, lam = r["time"], r["arrived"] / r["time"]
    assert r["wait_area"] / T == pytest.approx(lam * r["total_wait"] / r["arrived"], rel=1e-9)
    assert r["system_area"] / T == pytest.approx(
        lam * r["total_journey"] / r["arrived"], rel=1e-9
    )


def test_ridehail_littles_law():
    """Open requests: integral of ``len(model.open)`` = total time open (up to the end);
    every cancellation leaves ``open`` exactly at its ``deadline``."""
    r = v.ridehail_little(0, preset="small")
    assert r["seen"] == r["requests"] > 0
    assert r["cancelled_at_deadline"] == r["cancelled"]
    assert r["served"] + r["cancelled"] + r["open_at_end"] == r["requests"]
    T, lam = r["time"], r["requests"] / r["time"]
    assert r["open_area"] / T == pytest.approx(lam * r["total_open_time"] / r["requests"], rel=1e-9)


# ---- jobshop: one machine -------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_jobshop_one_machine_runs_wspt_after_the_first_job(seed):
    """One machine, 7 one-operation jobs arriving within ~1e-9 of t = 0. The machine starts
    job 0 alone at t = 0 (it never idles); from then on every job is queued, and the
    heuristic's order, hence the total weighted completion time, is the brute-force optimum
    over the orders that start with job 0 (Smith's rule on the rest)."""
    r = v.jobshop_single_machine(seed, **v.SMITH)
    p, w = r["p"], r["w"]
    assert r["last_release"] < 1e-6 < min(p)
    assert r["order"] == [0] + v.wspt_order(p, w, range(1, len(p)))
    best, _ = v.best_order(p, w, first=0)
    assert r["value"] == pytest.approx(best, rel=1e-9)


def test_jobshop_one_machine_jobs_released_at_zero_follow_smiths_rule():
    """All jobs released at exactly t = 0: WSPT (the heuristic) gives the brute-force minimum
    of the total weighted completion time over all 7! orders. (This found a bug: the mask
    was set when the machine asked, before the jobs arriving at that instant, so only slot 0
    was allowed; masks are now refreshed with the observation.)"""
    for seed in range(10):
        r = v.jobshop_single_machine(seed, n_jobs=7, at_zero=True)
        assert r["last_release"] == 0.0
        best, _ = v.best_order(r["p"], r["w"])
        assert r["value"] == pytest.approx(best, rel=1e-9), seed


# ---- supply chain: one stock point ------------------------------------------------------------


@pytest.fixture(scope="module")
def base_stock_runs():
    return v.replicate(v.supplychain_base_stock, v.BASE_STOCK)


def test_supplychain_one_node_base_stock(base_stock_runs):
    """One node, Poisson(4) demand, lead time 2, order-up-to 14 every period: fill rate,
    mean on hand and mean backlog of the periodic-review base-stock formulas."""
    for r in base_stock_runs:
        assert r["clipped"] == 0  # every order was exactly S - inventory position
    c = v.BASE_STOCK
    theory = v.base_stock(c["S"], c["demand_rate"], c["lead"])
    for q, value in theory.items():
        est = v.estimate(r[q] for r in base_stock_runs)
        assert est.covers(value, v.K), (q, value, str(est))


def test_supplychain_base_stock_check_rejects_wrong_theory(base_stock_runs):
    """The same data reject S - 1 and the continuous-review formula P(Poisson(lam L) < S)."""
    c = v.BASE_STOCK
    est = v.estimate(r["fill_rate"] for r in base_stock_runs)
    wrong = v.base_stock(c["S"] - 1, c["demand_rate"], c["lead"])["fill_rate"]
    assert not est.covers(wrong, v.K)
    continuous = v.poisson_cdf(c["S"] - 1, c["demand_rate"] * c["lead"])
    assert not est.covers(continuous, v.K)
