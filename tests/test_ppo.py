"""deszoo.ppo: the hand-written PPO loop's collection forms and its phase timing."""

from __future__ import annotations

import re

import pytest

from deszoo.errors import ConfigError

torch = pytest.importorskip("torch", reason="deszoo.ppo needs torch: pip install torch")
ppo = pytest.importorskip("deszoo.ppo")

# A few updates of a few steps: seconds, not a learning run.
KW = dict(timesteps=768, num_envs=4, n_steps=16, minibatch=64, epochs=2, seed=5,
          preset="small")


def _params(net) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


@pytest.mark.parametrize(("backend", "workers", "extra"), [
    ("shm", 2, {}),
    ("shm", 4, {"centralised": True, "time_scale": 5.0}),  # two workers per half
    ("roundrobin", None, {}),
])
def test_pipelined_collection_is_bit_identical_to_its_synchronous_form(backend, workers,
                                                                      extra):
    """Double-buffered send/recv over two halves trains the same weights as stepping each
    half to completion before the policy acts on the other."""
    kw = {**KW, **extra, "backend": backend, "num_workers": workers}
    halves = _params(ppo.train("jobshop_v0", collect="halves", **kw))
    pipelined = _params(ppo.train("jobshop_v0", collect="pipelined", **kw))
    assert torch.equal(halves, pipelined)
    assert not torch.equal(halves, _params(ppo.train("jobshop_v0", **{**KW, **extra})))


def test_the_halves_are_the_simulations_of_sync():
    """The two halves are seeded as the sims of one vector env: their first observations,
    side by side, are the sync vector env's."""
    import numpy as np

    kw = {"autoreset_mode": "SameStep", "state": False, "preset": "small"}
    (whole,) = ppo._make_parts("jobshop_v0", 5, "sync", "roundrobin", None, 7, None, kw)
    halves = ppo._make_parts("jobshop_v0", 5, "pipelined", "shm", 2, 7, None, kw)
    try:
        assert [h.vec.num_sims for h in halves] == [2, 3]
        obs = np.concatenate([h.reset()[0] for h in halves])
        assert np.array_equal(obs, whole.reset()[0])
    finally:
        for p in (whole, *halves):
            p.vec.close()


def test_phases_are_measured_and_fit_in_the_wall_time():
    """Every phase gets time and calls, and together they take no more than the wall."""
    phases = ppo.Phases()
    ppo.train("jobshop_v0", collect="pipelined", phases=phases, **KW)
    shares = phases.shares()
    assert phases.wall > 0
    assert all(phases.seconds[p] > 0 and phases.calls[p] > 0 for p in ppo.PHASES)
    assert phases.calls["update"] == 4  # one per update: 768 // (16 steps * 12 rows)
    assert sum(phases.seconds.values()) <= phases.wall
    assert sum(shares.values()) == pytest.approx(1.0)


def test_bad_collect_and_too_few_sims_are_config_errors():
    with pytest.raises(ConfigError, match="collect='async'"):
        ppo.train("jobshop_v0", collect="async", **KW)
    with pytest.raises(ConfigError, match="at least 2 simulations"):
        ppo.train("jobshop_v0", collect="halves", **{**KW, "num_envs": 1})
    with pytest.raises(ConfigError, match="unknown phase"):
        ppo.Phases().wrap(print, "sleep")


@pytest.mark.parametrize(("name", "value", "expects"), [
    ("n_steps", 0, "a positive int"),  # ZeroDivisionError
    ("minibatch", 0, "a positive int"),  # torch's "split_size can only be 0 ..."
    ("seed", None, "an int in 0..4,294,967,295"),  # TypeError from torch.manual_seed
    ("time_scale", 0, "None or a finite number > 0"),  # discounts of 0 ** inf, silently
    ("time_scale", -1.0, "None or a finite number > 0"),  # discounts above 1, silently
    ("gamma", 2.0, "a finite number x with 0 <= x <= 1"),  # trained, silently
    ("hidden", 0, "a positive int"),  # an empty network, trained silently
])
def test_bad_hyperparameters_are_config_errors_naming_them(name, value, expects):
    with pytest.raises(ConfigError, match=re.escape(f"train: {name}={value!r} must be "
                                                    f"{expects}")):
        ppo.train("jobshop_v0", **{**KW, name: value})


def test_options_train_sets_itself_are_refused_in_kw():
    for k, v in (("state", True), ("autoreset_mode", "NextStep")):  # were TypeErrors
        with pytest.raises(ConfigError, match=f"train: {k}=.* is train's to set"):
            ppo.train("jobshop_v0", **{**KW, k: v})


def test_a_scenario_of_box_actions_is_refused_naming_them():
    """The loop's Categorical policy needs Discrete actions: a ConfigError naming the action
    type (it was an AttributeError about n_actions)."""
    with pytest.raises(ConfigError, match="supplychain_v0 has Box actions; the loop.s "
                                          "policy needs Discrete"):
        ppo.train("supplychain_v0", timesteps=256, num_envs=2, continuous=True,
                  preset="small", backend="roundrobin")


@pytest.mark.parametrize("collect", ["halves", "pipelined"])
def test_the_halves_workers_fit_their_sims(collect, monkeypatch):
    """The halves split the workers so that neither gets more than it has sims: by default
    on a machine with more cores than sims (it asked for 4 workers for a half of 2 sims),
    and for an odd count the user gave (3 workers for 3 sims: 2 for the half of 1)."""
    kw = {**KW, "timesteps": 1, "n_steps": 2, "epochs": 0}
    monkeypatch.setattr(ppo, "usable_cores", lambda: 8)
    ppo.train("jobshop_v0", collect=collect, **kw)
    monkeypatch.undo()
    ppo.train("jobshop_v0", collect=collect, **{**kw, "num_envs": 3, "num_workers": 3})
    with pytest.raises(ConfigError, match="train: num_workers=5 is more than num_envs=4"):
        ppo.train("jobshop_v0", collect=collect, **{**kw, "num_workers": 5})


def test_rows_of_a_recv_are_put_in_row_order():
    """recv() gives rows in the order its workers finished; the loop sorts every per-row
    array (nested ones too) by env_id and leaves an ordered batch as it is."""
    import numpy as np

    ids = np.array([3, 4, 5, 0, 1, 2])
    obs = ids[:, None] * np.ones((6, 2))
    infos = {"env_id": ids, "action_mask": ids[:, None] == np.arange(6),
             "final_info": {"sim_time": ids * 1.0}, "scalar": 7}
    obs2, rew, _, _, infos2 = ppo._in_order((obs, ids * 10.0, ids > 2, ids < 0, infos))
    assert np.array_equal(obs2[:, 0], np.arange(6))
    assert np.array_equal(rew, np.arange(6) * 10.0)
    assert np.array_equal(infos2["action_mask"], np.eye(6, dtype=bool))
    assert np.array_equal(infos2["final_info"]["sim_time"], np.arange(6.0))
    assert infos2["scalar"] == 7
    ordered = (obs2, rew, ids, ids, infos2)
    assert ppo._in_order(ordered) is ordered
