"""fl / centralised engines on tiny synthetic data: FedAvg against a hand-rolled round, selection,
Ratio-Loss hand-over, monitor records, early switch, resume from a saved state."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from fedbalance.engine.centralised import num_epochs, run_centralised
from fedbalance.engine.fl import (
    ROUND_COLUMNS,
    TAG_CLIENT,
    FLError,
    JobData,
    RoundState,
    derive_seed,
    needs_monitor,
    run_fedavg,
    select_clients,
    sgd_config,
    torch_generator,
)
from fedbalance.methods.losses import LogitAdjustedLoss, get_loss
from fedbalance.methods.models import build_model
from fedbalance.data.partition import make_partition
from fedbalance.training.train import local_sgd

torch.set_num_threads(1)
Q = 10


def spec(**over) -> dict:
    s = {
        # names and data keys a job spec carries; the tests hand the engine its model, data and partitions
        "experiment": "unit", "dataset": "synthetic", "setting": "s", "source": "synthetic", "model": "lenet5",
        "partition": {"scheme": "monitor", "num_clients": 5, "samples_per_class": 6},
        "seed": 3,
        "loss": "ce",
        "mode": "fl",
        "rounds": 2,
        "local_epochs": 1,
        "centralised_epochs": None,
        "batch_size": 16,
        "lr": 0.05,
        "momentum": 0.9,
        "weight_decay": 5e-4,
        "aggregation": "mean",
        "path": "sequential",
        "selection": "fixed",
        "clients_per_round": 3,
        "switch_round": None,
        "empirical": False,
        "eval_every": 1,
        "monitor": {
            "record": False,
            "aux_per_class": 4,
            "estimators": ["paper", "released", "nnls"],
            "t_ra": 1.25,
            "variant": "paper",
            "alpha": 1.0,
            "beta": 0.1,
            "acknowledge": {"threshold": 1.5, "rounds": 1},
        },
        "loss_params": {},
    }
    s.update(over)
    return s


@pytest.fixture(scope="module")
def data(tiny_job_data) -> JobData:
    assert tiny_job_data.num_classes == Q
    return tiny_job_data


def partition(gamma: float = 4.0, seed: int = 3):
    labels = torch.arange(Q).repeat_interleave(30).numpy()
    return make_partition(
        "imbalance", labels, num_classes=Q, num_clients=4, min_classes=3, max_classes=6,
        majority_samples=12, gamma=gamma, minority_classes=(2, 4, 7), seed=seed,
    )


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("lenet5", 1, Q, (28, 28))


def run(s: dict, data: JobData, parts: dict, **kw):
    m = model()
    loss = get_loss(s["loss"], Q, **s["loss_params"].get(s["loss"], {}))
    runner = run_centralised if s["mode"] == "centralised" else run_fedavg
    return runner(s, m, loss, data, parts, **kw), m, loss


def test_select_clients():
    a = [select_clients("fixed", 10, 4, 7, t).tolist() for t in range(3)]
    assert a[0] == a[1] == a[2] and len(set(a[0])) == 4 and a[0] == sorted(a[0])
    r = [select_clients("random", 10, 4, 7, t).tolist() for t in range(6)]
    assert len({tuple(x) for x in r}) > 1
    assert r == [select_clients("random", 10, 4, 7, t).tolist() for t in range(6)]
    assert select_clients("fixed", 10, 4, 8, 0).tolist() != a[0] or select_clients("fixed", 10, 4, 9, 0).tolist() != a[0]
    with pytest.raises(FLError, match="clients_per_round"):
        select_clients("fixed", 3, 4, 0, 0)
    assert derive_seed(1, 2, 3) == derive_seed(1, 2, 3) != derive_seed(1, 2, 4)


@pytest.mark.parametrize("aggregation", ["mean", "weighted"])
def test_one_round_is_fedavg(data, aggregation):
    s = spec(rounds=1, aggregation=aggregation)
    p = partition()
    state, m, _ = run(s, data, {"main": p})
    chosen = select_clients("fixed", 4, 3, s["seed"], 0)
    ref, states, sizes = model(), [], []
    start = copy.deepcopy(ref.state_dict())
    for j in chosen:
        ref.load_state_dict(start)
        idx = torch.as_tensor(np.array(p.clients[j]))
        local_sgd(ref, data.x_train[idx], data.y_train[idx], torch.nn.CrossEntropyLoss(), sgd_config(s), torch_generator(s["seed"], TAG_CLIENT, 0, int(j)))
        states.append(copy.deepcopy(ref.state_dict()))
        sizes.append(len(idx))
    w = np.array(sizes, float) / sum(sizes) if aggregation == "weighted" else np.full(3, 1 / 3)
    for k, v in m.state_dict().items():
        expect = sum(float(wi) * st[k].double() for wi, st in zip(w, states))
        assert torch.allclose(v.double(), expect, atol=1e-6), k
    assert not torch.equal(m.state_dict()["classifier.weight"], start["classifier.weight"])
    row = state.rows[0]
    assert set(row) == set(ROUND_COLUMNS)
    assert row["cs_paper"] is None and row["weights"] is None and row["acc"] is not None
    counts = p.class_counts(data.y_train.numpy())[chosen].sum(0)
    assert row["true_composition"] == counts.astype(float).tolist()


def test_ratio_weights_handed_over_and_monitor_recorded(data):
    s = spec(loss="ratio", rounds=2, selection="random")
    p = partition()
    state, _, loss = run(s, data, {"main": p})
    rows = state.rows
    for t, row in enumerate(rows):
        true = np.array(row["true_composition"])
        chosen = select_clients("random", 4, 3, s["seed"], t)
        assert true.tolist() == p.class_counts(data.y_train.numpy())[chosen].sum(0).astype(float).tolist()
        uni = np.full(Q, true.sum() / Q)
        assert row["cs_uniform"] == pytest.approx(uni @ true / (np.linalg.norm(uni) * np.linalg.norm(true)))
        for m in ("paper", "released", "nnls"):
            est = np.array(row[f"est_{m}"])
            assert est.shape == (Q,)
            assert row[f"cs_{m}"] == pytest.approx(est @ true / (np.linalg.norm(est) * np.linalg.norm(true)))
        assert isinstance(row["acknowledged"], bool)
    # round 1's clients trained with the weights the monitor produced in round 0
    assert torch.allclose(loss.weight.double(), torch.tensor(rows[0]["weights"], dtype=torch.float64), atol=1e-6)
    assert rows[0]["weights"] != rows[1]["weights"]
    assert torch.equal(state.pi, torch.tensor(rows[1]["weights"], dtype=torch.float64))
    if any(r["acknowledged"] for r in rows):
        assert state.ack_round == min(t for t, r in enumerate(rows) if r["acknowledged"])


def test_switch_round_trains_on_balanced_partition(data):
    s = spec(rounds=3, switch_round=2, eval_every=2, empirical=True)
    main, bal = partition(4.0), partition(1.0)
    state, _, _ = run(s, data, {"main": main, "balanced": bal})
    chosen = select_clients("fixed", 4, 3, s["seed"], 0)
    y = data.y_train.numpy()
    comps = [r["true_composition"] for r in state.rows]
    assert comps[0] == comps[1] == main.class_counts(y)[chosen].sum(0).astype(float).tolist()
    assert comps[2] == bal.class_counts(y)[chosen].sum(0).astype(float).tolist()
    assert [r["acc"] is not None for r in state.rows] == [False, True, True]
    assert all(0 < r["emp_cos"] <= 1 + 1e-9 and r["emp_cv"] >= 0 for r in state.rows)
    with pytest.raises(FLError, match="balanced"):
        run(s, data, {"main": main})


def test_fedavg_resume_is_bit_identical(data):
    s = spec(loss="ratio", rounds=3, selection="random")
    parts = {"main": partition()}
    full, m_full, _ = run(s, data, parts)
    saved = {}

    class Stop(Exception):
        pass

    def stop(state, row):
        saved["state"] = RoundState.from_dict(copy.deepcopy(state.to_dict()))  # as a checkpoint holds it
        if row["round"] == 1:
            raise Stop

    with pytest.raises(Stop):
        run(s, data, parts, on_round=stop)
    assert saved["state"].next_round == 2
    resumed, m_res, _ = run(s, data, parts, state=saved["state"])
    for k, v in m_full.state_dict().items():
        assert torch.equal(v, m_res.state_dict()[k]), k
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(full.rows) == strip(resumed.rows)


def test_vectorised_matches_sequential(data):
    s = spec(rounds=1)
    seq, m_seq, _ = run(s, data, {"main": partition()})
    vec, m_vec, _ = run({**s, "path": "vectorised"}, data, {"main": partition()})
    for k, v in m_seq.state_dict().items():
        assert torch.allclose(v, m_vec.state_dict()[k], atol=1e-5), k


def test_centralised_pooled_epochs_ratio_and_resume(data):
    s = spec(mode="centralised", loss="ratio", rounds=2, local_epochs=1)
    assert num_epochs(s) == 2 and num_epochs({**s, "centralised_epochs": 5}) == 5
    p = partition()
    full, m_full, loss = run(s, data, {"main": p})
    rows = full.rows
    assert len(rows) == 2
    pooled = np.bincount(data.y_train.numpy()[p.pooled()], minlength=Q).astype(float).tolist()
    assert all(r["true_composition"] == pooled for r in rows)
    assert all(r["cs_nnls"] is not None for r in rows)
    assert torch.allclose(loss.weight.double(), torch.tensor(rows[0]["weights"], dtype=torch.float64), atol=1e-6)
    first = {}

    def keep(state, row):
        if row["round"] == 0:
            first["state"] = copy.deepcopy(state)

    run(s, data, {"main": p}, on_round=keep)
    resumed, m_res, _ = run(s, data, {"main": p}, state=first["state"])
    for k, v in m_full.state_dict().items():
        assert torch.equal(v, m_res.state_dict()[k]), k
    assert [r["train_loss"] for r in resumed.rows] == [r["train_loss"] for r in rows]


# ---------------------------------------------------------------- beyond the paper (docs/baselines.md)


def test_la_prior_is_the_monitors_estimate_handed_over(data, monkeypatch):
    s = spec(loss="la", rounds=2, selection="random")
    assert needs_monitor(s) and not needs_monitor(spec(loss="la_local")) and not needs_monitor(spec(loss="fedrs"))
    installed = []
    original = LogitAdjustedLoss.set_prior

    def spy(self, counts):
        installed.append(torch.as_tensor(counts, dtype=torch.float64).clone())
        original(self, counts)

    monkeypatch.setattr(LogitAdjustedLoss, "set_prior", spy)
    state, _, loss = run(s, data, {"main": partition()})
    rows = state.rows
    lead = s["monitor"]["estimators"][0]
    # round 0: uniform; round 1: the lead estimator's estimate of round 0's composition
    assert len(installed) == 2
    assert torch.equal(installed[0], torch.ones(Q, dtype=torch.float64))
    torch.testing.assert_close(installed[1], torch.tensor(rows[0][f"est_{lead}"], dtype=torch.float64))
    torch.testing.assert_close(loss.counts.double(), installed[1], rtol=1e-6, atol=1e-4)
    torch.testing.assert_close(state.prior, torch.tensor(rows[1][f"est_{lead}"], dtype=torch.float64))
    # the estimate is the monitor's, not the truth: it differs from the true composition
    assert rows[0][f"est_{lead}"] != rows[0]["true_composition"]


def test_la_round0_uniform_prior_is_ce(data):
    s = spec(rounds=1)
    _, m_ce, _ = run(s, data, {"main": partition()})
    _, m_la, _ = run({**s, "loss": "la"}, data, {"main": partition()})
    for k, v in m_ce.state_dict().items():
        assert torch.allclose(v, m_la.state_dict()[k], atol=1e-5), k


@pytest.mark.parametrize("name", ["fedrs", "fedlc", "la_local"])
def test_local_counts_per_client_and_paths_agree(data, name, monkeypatch):
    s = spec(loss=name, rounds=1)
    p = partition()
    seen = []
    cls = type(get_loss(name, Q))
    original = cls.set_client_counts

    def spy(self, counts):
        seen.append(torch.as_tensor(counts).tolist())
        original(self, counts)

    with monkeypatch.context() as mp:
        mp.setattr(cls, "set_client_counts", spy)
        _, m_seq, _ = run(s, data, {"main": p})
    chosen = select_clients("fixed", 4, 3, s["seed"], 0)
    assert seen == p.class_counts(data.y_train.numpy())[chosen].astype(float).tolist()
    _, m_vec, _ = run({**s, "path": "vectorised"}, data, {"main": p})
    _, m_ce, _ = run({**s, "loss": "ce"}, data, {"main": p})
    for k, v in m_seq.state_dict().items():
        assert torch.allclose(v, m_vec.state_dict()[k], atol=1e-5), k
    assert not torch.allclose(m_seq.state_dict()["classifier.weight"], m_ce.state_dict()["classifier.weight"], atol=1e-4)


def test_centralised_local_counts_are_the_pool_and_la_gets_the_prior(data):
    p = partition()
    pooled = np.bincount(data.y_train.numpy()[p.pooled()], minlength=Q).astype(float)
    _, _, loss = run(spec(mode="centralised", loss="la_local", rounds=1, local_epochs=1), data, {"main": p})
    assert loss.counts.tolist() == pooled.tolist()
    state, _, loss = run(spec(mode="centralised", loss="la", rounds=2, local_epochs=1), data, {"main": p})
    lead = spec()["monitor"]["estimators"][0]
    torch.testing.assert_close(loss.counts.double(), torch.tensor(state.rows[0][f"est_{lead}"], dtype=torch.float64), rtol=1e-6, atol=1e-4)


def test_la_resume_is_bit_identical(data):
    """The monitor's prior is part of the checkpointed state: a resumed la run equals an uninterrupted one."""
    s = spec(loss="la", rounds=3, selection="random")
    parts = {"main": partition()}
    full, m_full, _ = run(s, data, parts)
    saved = {}

    def keep(state, row):
        if row["round"] == 1:
            saved["state"] = copy.deepcopy(state)

    run(s, data, parts, on_round=keep)
    assert not torch.equal(saved["state"].prior, torch.ones(Q, dtype=torch.float64))
    resumed, m_res, _ = run(s, data, parts, state=saved["state"])
    for k, v in m_full.state_dict().items():
        assert torch.equal(v, m_res.state_dict()[k]), k
    assert [r["train_loss"] for r in full.rows] == [r["train_loss"] for r in resumed.rows]


def test_round_state_checkpoint_dict(data):
    """``to_dict`` keeps the checkpoint layout of the untyped state; a state written before the
    monitor prior existed still reads; unknown keys are refused, not misread."""
    state, _, _ = run(spec(loss="ratio", rounds=1), data, {"main": partition()})
    d = state.to_dict()
    assert set(d) == {"next_round", "model", "loss_state", "pi", "prior", "ack", "ack_round", "rows", "extra"}
    back = RoundState.from_dict(d)
    assert back.next_round == 1 and back.rows == state.rows and torch.equal(back.pi, state.pi)
    legacy = {k: v for k, v in d.items() if k != "prior"}
    legacy["extra"] = {"optimizer": {"state": {}}, "wall_time_s": 2.5}
    old = RoundState.from_dict(legacy)
    assert old.prior is None and old.optimizer == {"state": {}} and old.wall_time_s == 2.5
    with pytest.raises(ValueError, match="unknown keys"):
        RoundState.from_dict({**d, "format": 2})
    with pytest.raises(ValueError, match=r"missing keys \['model'\]"):
        RoundState.from_dict({k: v for k, v in d.items() if k != "model"})
