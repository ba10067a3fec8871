"""pack: jobs trained as one stack of copies give each job its own numbers (float64: those it gets alone on the
vectorised path), keep their generators and loss state apart, resume after a kill, skip finished jobs, refuse
jobs of different shapes before writing anything."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import fedbalance.methods.metrics as metrics_mod
import fedbalance.monitor.monitor as monitor_mod
import fedbalance.jobs.pack as pack_mod
import fedbalance.training.sgd as sgd_mod
import fedbalance.training.vectorised as vec_mod
from fedbalance.cli import main
from fedbalance.jobs.config import configured_job, load_config
from fedbalance.engine.fl import JobData, RoundState, run_fedavg
from fedbalance.jobs.run import CHECKPOINT, run_job
from fedbalance.common.jobspec import as_spec
from fedbalance.methods.losses import feed, get_loss
from fedbalance.methods.models import build_model
from fedbalance.jobs.pack import PackError, PackMember, run_pack, run_together
from fedbalance.data.partition import make_partition
from fedbalance.common.records import Job
from fedbalance.training.train import SGDConfig
from fedbalance.training.vectorised import train_copies_vectorised

Q = 10
TOL64 = 1e-10


@pytest.fixture(autouse=True, scope="module")
def _one_thread(torch_one_thread):
    """Every test of this module runs with one torch thread (conftest.torch_one_thread)."""


def fl_spec(loss: str, seed: int, **over) -> dict:
    s = {
        "experiment": "unit", "dataset": "synthetic", "setting": "s", "source": "synthetic", "model": "lenet5",
        "partition": {"scheme": "imbalance", "num_clients": 4}, "seed": seed, "loss": loss, "mode": "fl", "rounds": 2,
        "local_epochs": 1, "centralised_epochs": None, "batch_size": 16, "lr": 0.05, "momentum": 0.9,
        "weight_decay": 5e-4, "aggregation": "mean", "path": "vectorised", "selection": "random",
        "clients_per_round": 3, "switch_round": None, "empirical": False, "eval_every": 1,
        "monitor": {"record": True, "aux_per_class": 4, "estimators": ["paper", "released", "nnls"], "t_ra": 1.25,
                    "variant": "paper", "alpha": 1.0, "beta": 0.1, "acknowledge": {"threshold": 1.5, "rounds": 1}},
        "loss_params": {},
    }
    s.update(over)
    return s


@pytest.fixture(scope="module")
def data(tiny_job_data) -> JobData:
    assert tiny_job_data.num_classes == Q
    return tiny_job_data


def parts(seed: int, gamma: float = 4.0) -> dict:
    labels = torch.arange(Q).repeat_interleave(30).numpy()
    return {"main": make_partition("imbalance", labels, num_classes=Q, num_clients=4, min_classes=3, max_classes=6,
                                   majority_samples=12, gamma=gamma, minority_classes=(2, 4, 7), seed=seed)}


@pytest.fixture
def float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model input in float64 (the models are made double below)."""
    for mod in (sgd_mod, vec_mod, metrics_mod, monitor_mod):
        monkeypatch.setattr(mod, "to_float", lambda x: x.double())


def model_and_loss(spec: dict) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(spec["seed"])
    return build_model("lenet5", 1, Q, (28, 28)).double(), get_loss(spec["loss"], Q)


# ce, ratio, focal, la (the monitor's prior) and a second ratio job that differs from the first in seed only
JOBS = [("ce", 3, 3), ("ratio", 4, 4), ("focal", 5, 5), ("la", 6, 6), ("ratio", 7, 4)]


def alone(spec: dict, data: JobData, p: dict) -> RoundState:
    m, loss = model_and_loss(spec)
    return run_fedavg(spec, m, loss, data, p)


def packed(specs: list[dict], data: JobData, ps: list[dict]) -> tuple[list[RoundState], pack_mod.PackTrainer]:
    members = []
    for s, p in zip(specs, ps):
        m, loss = model_and_loss(s)
        members.append(PackMember(as_spec(s), m, loss, data, p))
    trainer = run_together(members)
    return [m.result for m in members], trainer


def max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def rows_diff(a: list[dict], b: list[dict]) -> float:
    """Largest difference between two runs' rows (every recorded number; "seconds" aside); inf if their keys differ."""
    worst = 0.0
    for ra, rb in zip(a, b, strict=True):
        for k in ra:
            if k == "seconds":
                continue
            va, vb = ra[k], rb[k]
            if (va is None) != (vb is None):
                return float("inf")
            if va is None or isinstance(va, bool):
                worst = worst if va == vb else float("inf")
                continue
            ta, tb = torch.as_tensor(va, dtype=torch.float64), torch.as_tensor(vb, dtype=torch.float64)
            worst = max(worst, float((ta - tb).abs().max()) if ta.numel() else 0.0)
    return worst


def test_a_pack_gives_every_job_its_own_numbers_float64(float64, data):
    """Five jobs of different losses, seeds and partitions, two rounds, as one pack: each job's model, loss state
    and rows (monitor estimates, weights pi, acknowledgment, metrics) are those it gets alone on the vectorised
    path, to 1e-10; in any order; and jobs differing in seed only do differ."""
    specs = [fl_spec(loss, seed) for loss, seed, _ in JOBS]
    ps = [parts(pseed) for _, _, pseed in JOBS]
    ref = [alone(s, data, p) for s, p in zip(specs, ps)]
    got, trainer = packed(specs, data, ps)
    assert trainer.calls == 2 and trainer.trained == 2 * len(JOBS)
    for r, g in zip(ref, got):
        assert max_diff(r.model, g.model) <= TOL64
        assert rows_diff(r.rows, g.rows) <= TOL64
        assert torch.equal(r.pi, g.pi) or float((r.pi - g.pi).abs().max()) <= TOL64
    # the two ratio jobs (same partition, seeds 4 and 7) got different pi after round 0 and end apart
    assert float((torch.tensor(ref[1].rows[0]["weights"]) - torch.tensor(ref[4].rows[0]["weights"])).abs().max()) > 1e-3
    assert max_diff(ref[1].model, ref[4].model) > 1e-3
    # permuted: every job's numbers are its own, whatever its place in the pack
    order = [3, 0, 4, 2, 1]
    again, _ = packed([specs[i] for i in order], data, [ps[i] for i in order])
    for i, g in zip(order, again):
        assert max_diff(ref[i].model, g.model) <= TOL64 and rows_diff(ref[i].rows, g.rows) <= TOL64


def test_a_plugin_loss_in_a_pack_gives_the_numbers_it_gets_alone_float64(float64, data, monkeypatch):
    """The example plug-in's class-balanced losses (examples/fedbalance-cb, by dotted path), one fed the monitor's prior
    and one each client's own counts, packed with a Ratio-Loss job: each job's model and rows are those it gets alone,
    to 1e-10, and the plug-in's weights did act (its job ends apart from the same job's with beta = 0, plain CE)."""
    from fedbalance.common import plugins

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "examples" / "fedbalance-cb" / "src"))
    plugins.forget()
    cb, local = "fedbalance_cb.losses:ClassBalancedLoss", "fedbalance_cb.losses:ClassBalancedLocalLoss"
    specs = [fl_spec(cb, 4, loss_params={cb: {"beta": 0.99}}), fl_spec("ratio", 5),
             fl_spec(local, 6, loss_params={local: {"beta": 0.99}})]
    ps = [parts(4), parts(5), parts(6)]

    def build(spec):
        torch.manual_seed(spec["seed"])
        kwargs = spec["loss_params"].get(spec["loss"], {})
        return build_model("lenet5", 1, Q, (28, 28)).double(), get_loss(spec["loss"], Q, **kwargs)

    ref = []
    for s, p in zip(specs, ps):
        m, loss = build(s)
        ref.append(run_fedavg(s, m, loss, data, p))
    members = []
    for s, p in zip(specs, ps):
        m, loss = build(s)
        members.append(PackMember(as_spec(s), m, loss, data, p))
    trainer = run_together(members)
    assert trainer.calls == 2 and trainer.trained == 2 * len(specs)
    for r, member in zip(ref, members):
        assert max_diff(r.model, member.result.model) <= TOL64
        assert rows_diff(r.rows, member.result.rows) <= TOL64
    plain = fl_spec(cb, 4, loss_params={cb: {"beta": 0.0}})
    m, loss = build(plain)
    assert max_diff(ref[0].model, run_fedavg(plain, m, loss, data, ps[0]).model) > 1e-4
    plugins.forget()


def test_the_check_fails_on_a_pack_that_mixes_jobs(float64, data, monkeypatch):
    """The comparison above catches a trainer that hands one job another's generators, or every copy the first
    job's loss state: the wrong pack's numbers are far from the jobs' own."""
    specs = [fl_spec("ratio", 4), fl_spec("ratio", 7)]
    ps = [parts(4), parts(4)]
    ref = [alone(s, data, p) for s, p in zip(specs, ps)]
    right = pack_mod.train_together

    def swapped_generators(works, cfg, plan):
        works = list(works)
        a, b = works[0], works[1]
        works[0] = pack_mod.ClientWork(a.model, a.loss_fn, a.datasets, b.generators)
        works[1] = pack_mod.ClientWork(b.model, b.loss_fn, b.datasets, a.generators)
        return right(works, cfg, plan)

    monkeypatch.setattr(pack_mod, "train_together", swapped_generators)
    wrong, _ = packed(specs, data, ps)
    assert max_diff(ref[0].model, wrong[0].model) > 1e-4

    def shared_loss_state(works, cfg, plan):
        head = works[0].loss_fn
        return right([pack_mod.ClientWork(w.model, head, w.datasets, w.generators) for w in works], cfg, plan)

    monkeypatch.setattr(pack_mod, "train_together", shared_loss_state)
    wrong, _ = packed(specs, data, ps)
    assert max_diff(ref[1].model, wrong[1].model) > 1e-4  # round 1 trained job 1 with job 0's pi


def test_per_copy_starts_and_loss_state_are_the_default_path_bit_for_bit():
    """``train_copies_vectorised`` with every copy's start and loss buffers given as the model's and the loss's own
    is the default call bit for bit; with two jobs' starts and pi, each job's slice is its own call bit for bit."""
    cfg = SGDConfig(lr=0.05, batch_size=8, epochs=1)
    g = torch.Generator().manual_seed(0)
    ds = [(torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8), torch.randint(0, Q, (n,), generator=g))
          for n in (20, 13, 17, 9)]
    gens = lambda: [torch.Generator().manual_seed(k) for k in range(4)]  # noqa: E731
    torch.manual_seed(0)
    m0 = build_model("lenet5", 1, Q, (28, 28))
    torch.manual_seed(1)
    m1 = build_model("lenet5", 1, Q, (28, 28))
    l0, l1 = get_loss("ratio", Q), get_loss("ratio", Q)
    feed(l0, weights=torch.linspace(0.5, 2.0, Q))
    feed(l1, weights=torch.linspace(2.0, 0.5, Q))
    default, dl = train_copies_vectorised(m0, ds, l0, cfg, gens())
    s0, s1 = m0.state_dict(), m1.state_dict()
    same, sl = train_copies_vectorised(m0, ds, l0, cfg, gens(), starts={k: torch.stack([v] * 4) for k, v in s0.items()},
                                       loss_state={"weight": torch.stack([l0.weight] * 4)})
    assert all(torch.equal(default[k], same[k]) for k in default) and torch.equal(dl, sl)
    a, al = train_copies_vectorised(m0, ds[:2], l0, cfg, gens()[:2])
    b, bl = train_copies_vectorised(m1, ds[2:], l1, cfg, gens()[2:])
    both, bothl = train_copies_vectorised(
        m0, ds, l0, cfg, gens(), starts={k: torch.stack([s0[k], s0[k], s1[k], s1[k]]) for k in s0},
        loss_state={"weight": torch.stack([l0.weight, l0.weight, l1.weight, l1.weight])})
    assert all(torch.equal(both[k][:2], a[k]) and torch.equal(both[k][2:], b[k]) for k in a)
    assert torch.equal(bothl, torch.cat([al, bl]))


@pytest.fixture(scope="module")
def quick() -> dict:
    return load_config("config/quick.yaml")


def tiny(quick: dict, loss: str, seed: int, **over) -> dict:
    spec = configured_job(quick, Job("losses", "mnist", "g10", loss, seed))
    spec["partition"].update(num_clients=4, majority_samples=12)
    spec["monitor"]["aux_per_class"] = 8
    spec.update(clients_per_round=3, rounds=3, batch_size=16, lr=0.05, selection="random", path="vectorised")
    spec.update(over)
    return spec


def _rows(folder: Path) -> list[dict]:
    with open(folder / "rounds.csv", newline="") as fh:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in csv.DictReader(fh)]


def _close(a: list[dict], b: list[dict], rel: float = 1e-5) -> bool:
    """Two rounds.csv's cells equal, numbers to ``rel`` (fp32 runs whose vmap calls hold different copies)."""
    for ra, rb in zip(a, b, strict=True):
        for k, va in ra.items():
            vb = rb[k]
            if va == vb:
                continue
            try:
                x, y = json.loads(va), json.loads(vb)
            except json.JSONDecodeError:
                return False
            if torch.as_tensor(x, dtype=torch.float64).shape != torch.as_tensor(y, dtype=torch.float64).shape:
                return False
            if not torch.allclose(torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64),
                                  rtol=rel, atol=1e-7):
                return False
    return len(a) == len(b)


class Killed(Exception):
    pass


def test_a_killed_pack_resumes_every_job_and_a_finished_job_is_not_retrained(quick, tmp_path):
    """Three jobs (ce, ratio, focal; seeds 0-2) as files: the pack equals each job run alone (vectorised); killed in
    round 1 it leaves checkpoints and no outputs, and the rerun equals the uninterrupted pack; a third run trains
    only a new job and leaves the finished ones' files untouched."""
    specs = [tiny(quick, "ce", 0), tiny(quick, "ratio", 1), tiny(quick, "focal", 2)]
    full = run_pack(specs, [tmp_path / "full" / str(i) for i in range(3)], device="cpu", progress=False)
    assert full.skipped == [] and full.calls == 3 and full.trained == 9
    assert all(m["path"] == "vectorised" and m["rounds"] == 3 for m in full.metrics)
    solo = run_job(specs[1], tmp_path / "solo", device="cpu", progress=False)
    assert _close(_rows(tmp_path / "solo"), _rows(tmp_path / "full" / "1"))
    assert solo["final"]["acc"] == pytest.approx(full.metrics[1]["final"]["acc"], abs=1e-6)

    outs = [tmp_path / "killed" / str(i) for i in range(3)]

    def kill(i, state, row):
        if i == 1 and row["round"] == 1:
            raise Killed

    with pytest.raises(Killed):
        run_pack(specs, outs, device="cpu", progress=False, on_round=kill)
    assert all((o / CHECKPOINT).exists() and not (o / "metrics.json").exists() and not (o / "rounds.csv").exists()
               for o in outs)
    done = [torch.load(o / CHECKPOINT, weights_only=False)["state"]["next_round"] for o in outs]
    assert done[1] == 2 and all(1 <= d <= 2 for d in done)
    resumed = run_pack(specs, outs, device="cpu", progress=False)
    assert resumed.trained == sum(3 - d for d in done) and resumed.skipped == []
    for i, o in enumerate(outs):
        assert _close(_rows(o), _rows(tmp_path / "full" / str(i)))
        assert resumed.metrics[i]["final"]["acc"] == pytest.approx(full.metrics[i]["final"]["acc"], abs=1e-6)
        assert not (o / CHECKPOINT).exists()

    stamps = [(o / "metrics.json").stat().st_mtime_ns for o in outs]
    more = run_pack([*specs, tiny(quick, "ratio", 3)], [*outs, tmp_path / "killed" / "3"], device="cpu", progress=False)
    assert more.skipped == [0, 1, 2] and more.trained == 3 and more.calls == 3
    assert [(o / "metrics.json").stat().st_mtime_ns for o in outs] == stamps
    assert more.metrics[:3] == resumed.metrics
    # a finished job of another spec in the folder is trained again (as run_job does)
    again = run_pack([tiny(quick, "ce", 0, lr=0.04)], [outs[0]], device="cpu", progress=False)
    assert again.skipped == [] and again.trained == 3 and again.metrics[0]["config"]["lr"] == 0.04


def test_a_failing_job_stops_the_pack_without_outputs(quick, tmp_path):
    """A job that raises in round 0 ends the pack with its error (no deadlock): the other jobs write no outputs."""
    specs = [tiny(quick, "ce", 0, rounds=2), tiny(quick, "ratio", 1, rounds=2)]
    outs = [tmp_path / "a", tmp_path / "b"]

    def fail(i, state, row):
        if i == 0:
            raise Killed

    with pytest.raises(Killed):
        run_pack(specs, outs, device="cpu", progress=False, on_round=fail)
    assert not any((o / f).exists() for o in outs for f in ("metrics.json", "rounds.csv"))


@pytest.mark.parametrize(
    ("over", "match"),
    [({"batch_size": 8}, "share batch_size"), ({"local_epochs": 1}, "share local_epochs"), ({"lr": 0.1}, "share lr"),
     ({"model": "cnn7"}, "share model"), ({"path": "sequential"}, "path = 'sequential'"),
     ({"mode": "centralised", "centralised_epochs": 2}, "mode = 'centralised'")],
)
def test_jobs_of_another_shape_are_refused_before_anything_is_written(quick, tmp_path, over, match):
    specs = [tiny(quick, "ce", 0), tiny(quick, "ratio", 1, **over)]
    with pytest.raises(PackError, match=match):
        run_pack(specs, [tmp_path / "a", tmp_path / "b"], device="cpu", progress=False)
    assert not any(tmp_path.iterdir())


def test_bad_packs_are_refused(quick, tmp_path):
    specs = [tiny(quick, "ce", 0), tiny(quick, "ratio", 1)]
    with pytest.raises(PackError, match="same folder"):
        run_pack(specs, [tmp_path / "a", tmp_path / "x" / ".." / "a"], device="cpu", progress=False)
    with pytest.raises(PackError, match="at least one job"):
        run_pack([], [], device="cpu", progress=False)
    with pytest.raises(PackError, match="2 jobs but 1 output"):
        run_pack(specs, [tmp_path / "a"], device="cpu", progress=False)
    assert not any(tmp_path.iterdir())


def test_pack_command_refuses_bad_jobs(tmp_path, capsys):
    base = ["pack", "--config", "config/quick.yaml", "--results", str(tmp_path / "r")]
    assert main([*base, "--job", "losses/mnist/g10/ce"]) == 2
    assert "is not a job folder" in capsys.readouterr().err
    assert main([*base, "--job", "losses/mnist/g10/nope/seed0"]) == 2
    assert "unknown loss 'nope'" in capsys.readouterr().err
    # config/quick.yaml trains on the sequential path, which a pack does not take
    assert main([*base, "--job", "losses/mnist/g10/ce/seed0", "--job", "losses/mnist/g10/ratio/seed0"]) == 2
    assert "path = 'sequential'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
