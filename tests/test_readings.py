"""The Ratio Loss as other code reads it (fedbalance.monitor.readings): each implementation's weights on identical
inputs beside the project's ``ratio`` and ``ratio_rel``, a tiny case computed by hand, the gradients and copies each
reading trains on against autograd, the loss weightings by hand, and a job that trains each reading end to end."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from fedbalance.engine.fl import run_fedavg
from fedbalance.jobs.config import schema
from fedbalance.methods.losses import RATIO_WEIGHTING, get_loss, ratio_loss
from fedbalance.methods.models import build_model
from fedbalance.monitor.estimators import RoundInputs
from fedbalance.monitor.monitor import READING_VARIANTS, VARIANTS, Monitor, class_ratios, ratio_weights
from fedbalance.monitor.readings import READINGS, round_weights, signed_mean_ratios
from fedbalance.training.sgd import SGDConfig
from fedbalance.data.partition import make_partition
from conftest import load_script

torch.set_num_threads(1)

# The hand case: Q = 3 classes, s = 2 units; DW[q, p, i] is class q's copy's update of weight (p, i).
DW = torch.tensor([[[4.0, 2.0], [-1.0, -1.0], [-1.0, 3.0]],
                   [[-2.0, -1.0], [3.0, 6.0], [-1.0, -1.0]],
                   [[-2.0, -1.0], [-1.0, -2.0], [2.0, 1.0]]], dtype=torch.float64)
# By hand. Own update of node p: p0 (4, 2), p1 (3, 6), p2 (2, 1). Other classes' mean o on node p: p0 (-2, -1),
# p1 (-1, -1.5), p2 ((-1 - 1)/2, (3 - 1)/2) = (-1, 1).
# paper (ratio): magnitudes |own|/|o| = p0 (2, 2), p1 (3, 4), p2 (2, 1); T_Ra = 1.25 keeps p2's first unit only:
#   Ra = (2, 3.5, 2), pi = 1 + 0.1 Ra = (1.2, 1.35, 1.2).
# released (ratio_rel; RedGrape on the same dW): each weight's owner is the class of the largest signed update, kept
#   when no other class is within 0.8 of it in magnitude: (0,0) (0,1) (2,1) -> class 0 (at (2,1): 3 vs -1, 1),
#   (1,0) (1,1) -> class 1, (2,0) -> class 2. Ra_0 = |4 + 2 + 3| / |(-2) + (-1) + (-1 + 1)/2| = 9 / 3 = 3,
#   Ra_1 = |3 + 6| / |(-1) + (-1.5)| = 3.6, Ra_2 = |2| / |(-1 - 1)/2| = 2: pi = (1.3, 1.36, 1.2).
# climb: signed ratios own/o, averaged over both units, then |.|: p0 (-2, -2) -> 2, p1 (-3, -4) -> 3.5,
#   p2 (2/-1, 1/1) = (-2, 1) -> |-0.5| = 0.5: pi = (1.2, 1.35, 1.05).
# fedloge, flower: no Ra; pi = (1, 1, 1).
HAND = {
    "ratio": ([2.0, 3.5, 2.0], [1.2, 1.35, 1.2]),
    "ratio_rel": ([3.0, 3.6, 2.0], [1.3, 1.36, 1.2]),
    "redgrape": ([3.0, 3.6, 2.0], [1.3, 1.36, 1.2]),
    "climb": ([2.0, 3.5, 0.5], [1.2, 1.35, 1.05]),
    "fedloge": (None, [1.0, 1.0, 1.0]),
    "flower": (None, [1.0, 1.0, 1.0]),
}


def _table(rows: dict[str, list[float]]) -> str:
    return "\n".join(f"{name:>10}: " + "  ".join(f"{v:9.5f}" for v in pi) for name, pi in rows.items())


def test_registry_is_the_variants_and_schema() -> None:
    assert tuple(READINGS) == READING_VARIANTS and not set(READING_VARIANTS) & set(VARIANTS)
    assert {r.weighting for r in READINGS.values()} <= set(RATIO_WEIGHTING)
    monitor = schema()["$defs"]["monitor"]["properties"]
    assert set(monitor["variant"]["enum"]) == {*VARIANTS, *READING_VARIANTS}
    assert all("@" in r.source for r in READINGS.values())
    assert {n: r.equals for n, r in READINGS.items()} == {"redgrape": "ratio_rel", "climb": "", "fedloge": "ce",
                                                          "flower": "ce"}


def test_hand_case_weights() -> None:
    """Each reading's Ra and pi on the hand case's dW (the formulas; RedGrape's is the released one)."""
    mon = {v: Monitor(torch.zeros(3, 1), torch.arange(3), 3, SGDConfig(), variant=v) for v in ("paper", "released")}
    got = {"ratio": mon["paper"].weights(DW), "ratio_rel": mon["released"].weights(DW),
           "redgrape": (class_ratios(DW, variant="released"), ratio_weights(class_ratios(DW, variant="released"))),
           "climb": (signed_mean_ratios(DW), ratio_weights(signed_mean_ratios(DW)))}
    r = RoundInputs(mon["paper"], torch.nn.Identity(), {}, [1], torch.Generator())
    for name in ("fedloge", "flower"):
        got[name] = READINGS[name].fn(r)
    print("\nhand case pi (classes 0, 1, 2)\n" + _table({k: v[1].tolist() for k, v in got.items()}))
    for name, (ra, pi) in got.items():
        assert HAND[name][0] is None or ra.tolist() == pytest.approx(HAND[name][0], abs=1e-12), name
        assert pi.tolist() == pytest.approx(HAND[name][1], abs=1e-12), name


def test_signed_mean_leaves_out_units_without_a_ratio() -> None:
    """A unit no auxiliary sample activates (0/0) and one only class p's samples reach (x/0) are left out of the mean."""
    g = DW.clone()
    g[:, 0, 1] = 0.0                       # node 0, unit 1: 0/0
    g[0, 2, 1], g[1, 2, 1], g[2, 2, 1] = 0.0, 0.0, 5.0   # node 2, unit 1: 5/0
    assert signed_mean_ratios(g).tolist() == pytest.approx([2.0, 3.5, 2.0], abs=1e-12)
    assert signed_mean_ratios(torch.zeros(3, 3, 2, dtype=torch.float64)).tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_weightings_by_hand(reduction: str) -> None:
    """Two samples, CE log 2 (class 0) and log 3 (class 1), pi = (2, 5, 1): per_sample (pi_a CE_a + pi_b CE_b) / 2,
    batch_mean (pi_a + pi_b) / 2 (CE_a + CE_b) / 2, normalised (pi_a CE_a + pi_b CE_b) / (pi_a + pi_b), which is
    F.cross_entropy(weight=pi); 'sum' gives pi_a CE_a + pi_b CE_b for per_sample and normalised."""
    logits = torch.tensor([[math.log(2.0), 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    target = torch.tensor([0, 1])
    pi = torch.tensor([2.0, 5.0, 1.0], dtype=torch.float64)
    l2, l3 = math.log(2.0), math.log(3.0)
    if reduction == "mean":
        want = {"per_sample": (2 * l2 + 5 * l3) / 2, "batch_mean": 3.5 * (l2 + l3) / 2, "normalised": (2 * l2 + 5 * l3) / 7}
        assert float(F.cross_entropy(logits, target, weight=pi)) == pytest.approx(want["normalised"], rel=1e-12)
    else:
        want = {"per_sample": 2 * l2 + 5 * l3, "batch_mean": 3.5 * (l2 + l3), "normalised": 2 * l2 + 5 * l3}
    for weighting, value in want.items():
        assert float(ratio_loss(logits, target, pi, reduction, weighting)) == pytest.approx(value, rel=1e-12), weighting
    # a padded sample (mask 0) counts in neither sum; a batch of padding only gives 0, not 0/0
    padded = torch.cat([logits, torch.zeros(1, 3, dtype=torch.float64)])
    mask = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    got = ratio_loss(padded, torch.tensor([0, 1, 2]), pi, reduction, "normalised", mask)
    assert float(got) == pytest.approx(want["normalised"], rel=1e-12)
    assert float(ratio_loss(padded, torch.tensor([0, 1, 2]), pi, reduction, "normalised", torch.zeros(3))) == 0.0


Q = 3


def _round() -> tuple[RoundInputs, dict, float]:
    """Identical inputs for every reading: a fixed LeNet-5 (3 classes), an auxiliary batch of 4 images a class and a
    round update G_t -> G_{t+1} (the classifier moved by a fixed step). Returns the round, G_{t+1}'s state, the lr."""
    torch.manual_seed(0)
    model = build_model("lenet5", 1, Q, (28, 28))
    g = torch.Generator().manual_seed(1)
    aux_y = torch.arange(Q).repeat_interleave(4)
    aux_x = (torch.rand(len(aux_y), 1, 28, 28, generator=g) * 80 + aux_y.reshape(-1, 1, 1, 1) * 50).to(torch.uint8)
    cfg = SGDConfig(lr=0.05, momentum=0.9, weight_decay=5e-4, batch_size=16, epochs=3)
    state_t1 = {k: v.clone() for k, v in model.state_dict().items()}
    state_t1["classifier.weight"] += 0.2 * torch.randn(state_t1["classifier.weight"].shape, generator=g)
    state_t1["classifier.bias"] += torch.tensor([0.3, -0.2, 0.1])
    mon = Monitor(aux_x, aux_y, Q, cfg, variant="paper")
    return RoundInputs(mon, model, state_t1, [40, 40], torch.Generator().manual_seed(2)), state_t1, cfg.lr


def _autograd_class_gradients(model: torch.nn.Module, state: dict, aux_x: torch.Tensor, aux_y: torch.Tensor) -> torch.Tensor:
    """g[q] = d mean-CE(class q's aux samples) / d W_classifier at ``state``, by autograd: [Q, Q, s], float64."""
    classes = int(aux_y.max()) + 1
    net = build_model("lenet5", 1, classes, (28, 28))
    net.load_state_dict(state)
    out = []
    for q in range(classes):
        x = aux_x[aux_y == q].float() / 255.0
        loss = F.cross_entropy(net(x), aux_y[aux_y == q])
        out.append(torch.autograd.grad(loss, net.classifier.weight)[0].double())
    return torch.stack(out)


def _hand_signed_mean(g: torch.Tensor) -> list[float]:
    """CLIMB's Ra_p in plain Python: |mean_i (Q-1) g[p,p,i] / (sum_j g[j,p,i] - g[p,p,i])| over the units whose
    denominator is not 0 (a ReLU unit no aux sample activates has none)."""
    q, s = g.shape[0], g.shape[2]
    out = []
    for p in range(q):
        units = [((q - 1) * float(g[p, p, i]), sum(float(g[j, p, i]) for j in range(q)) - float(g[p, p, i]))
                 for i in range(s)]
        ratios = [a / b for a, b in units if b != 0.0]
        out.append(abs(sum(ratios) / len(ratios)))
    return out


def test_identical_inputs_every_reading() -> None:
    """One round, every reading's pi beside ratio's and ratio_rel's; CLIMB's from autograd's gradient at G_{t+1},
    RedGrape's from one SGD step of G_t without weight decay (4 aux samples a class, batch 16: one step, and the first
    step of momentum SGD is -lr g), both independent of the library's code paths."""
    r, state_t1, lr = _round()
    mon = r.monitor
    pis = {"ratio": Monitor(mon.aux_x, mon.aux_y, Q, mon.cfg, variant="paper").weights(r.dW)[1],
           "ratio_rel": Monitor(mon.aux_x, mon.aux_y, Q, mon.cfg, variant="released").weights(r.dW)[1]}
    for name in READINGS:
        r.monitor.variant = name
        pis[name] = round_weights(r)[1]
    print("\nidentical inputs pi (classes 0, 1, 2)\n" + _table({k: v.tolist() for k, v in pis.items()}))
    g_t1 = _autograd_class_gradients(r.model_t, state_t1, mon.aux_x, mon.aux_y)
    climb = [1.0 + 0.1 * ra for ra in _hand_signed_mean(g_t1)]
    assert pis["climb"].tolist() == pytest.approx(climb, rel=1e-5)
    g_t = _autograd_class_gradients(r.model_t, r.model_t.state_dict(), mon.aux_x, mon.aux_y)
    redgrape = ratio_weights(class_ratios(-lr * g_t, variant="released"))
    assert pis["redgrape"].tolist() == pytest.approx(redgrape.tolist(), rel=1e-4)
    assert pis["fedloge"].tolist() == pis["flower"].tolist() == [1.0, 1.0, 1.0]
    # the readings differ on these inputs: RedGrape's one-step copies are not ratio_rel's three-epoch ones, CLIMB's
    # gradient at G_{t+1} is not its gradient at G_t
    assert not torch.allclose(pis["redgrape"], pis["ratio_rel"], rtol=1e-3)
    at_t = [1.0 + 0.1 * ra for ra in _hand_signed_mean(g_t)]
    assert pis["climb"].tolist() != pytest.approx(at_t, rel=1e-3)


def test_dW_alone_cannot_give_a_readings_weights() -> None:
    r, _, _ = _round()
    r.monitor.variant = "climb"
    with pytest.raises(ValueError, match="reads the whole round"):
        r.monitor.weights(r.dW)


def _spec(variant: str, weighting: str) -> dict:
    return {
        "experiment": "unit", "dataset": "synthetic", "setting": "s", "source": "synthetic", "model": "lenet5",
        "partition": {"scheme": "imbalance"}, "seed": 3, "loss": "ratio", "mode": "fl", "rounds": 1, "local_epochs": 1,
        "centralised_epochs": None, "batch_size": 16, "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4,
        "aggregation": "mean", "path": "sequential", "selection": "fixed", "clients_per_round": 3, "switch_round": None,
        "empirical": False, "eval_every": 1,
        "monitor": {"record": False, "aux_per_class": 4, "estimators": ["released"], "t_ra": 1.25, "variant": variant,
                    "alpha": 1.0, "beta": 0.1, "acknowledge": {"threshold": 3.0, "rounds": 3}},
        "loss_params": {"ratio": {"weighting": weighting}},
    }


@pytest.mark.parametrize("name", ["climb", "redgrape"])
def test_a_job_trains_with_the_readings_weights(tiny_job_data, name: str) -> None:
    """One FedAvg round of the engine with the reading as the monitor's variant: the weights it hands the next round
    are the reading's, recomputed here by autograd from the job's own G_0 (RedGrape) or G_1 (CLIMB) and aux data."""
    data = tiny_job_data
    labels = torch.arange(10).repeat_interleave(30).numpy()
    parts = {"main": make_partition("imbalance", labels, num_classes=10, num_clients=4, min_classes=3, max_classes=6,
                                    majority_samples=12, gamma=4.0, minority_classes=(2, 4, 7), seed=3)}
    s = _spec(name, READINGS[name].weighting)
    torch.manual_seed(0)
    model = build_model("lenet5", 1, 10, (28, 28))
    g0 = {k: v.clone() for k, v in model.state_dict().items()}
    loss = get_loss("ratio", 10, **s["loss_params"]["ratio"])
    state = run_fedavg(s, model, loss, data, parts)
    pi = state.rows[0]["weights"]
    if name == "climb":
        ra = _hand_signed_mean(_autograd_class_gradients(model, model.state_dict(), data.aux_x, data.aux_y))
        want = [1.0 + 0.1 * v for v in ra]
    else:
        g = _autograd_class_gradients(model, g0, data.aux_x, data.aux_y)
        want = ratio_weights(class_ratios(-s["lr"] * g, variant="released")).tolist()
    assert pi == pytest.approx(want, rel=1e-4)
    assert all(math.isfinite(v) for v in pi) and state.rows[0]["train_loss"] > 0


def test_benchmark_pairs_each_reading_with_ratio_rel(tmp_path) -> None:
    """benchmarks/readings.py on synthetic job folders: the paired difference and its t interval by hand (t_{0.975,2}
    = 4.302653), CE's jobs standing for FedLoGe's and the Flower app's reading, a seed one side lacks left out."""
    from conftest import REPO_ROOT, write_job
    from fedbalance.common.records import Job

    bench = load_script("benchmarks/readings.py", "readings_bench")
    for seed, (climb, rel, ce) in enumerate([(0.80, 0.70, 0.60), (0.75, 0.70, 0.62), (0.90, 0.70, 0.58)]):
        write_job(tmp_path, Job("readings", "mnist", "g50", "ratio_climb", seed), acm=climb)
        write_job(tmp_path, Job("losses", "mnist", "g50", "ratio_rel", seed), acm=rel)
        write_job(tmp_path, Job("losses", "mnist", "g50", "ce", seed), acm=ce)
    write_job(tmp_path, Job("readings", "mnist", "g50", "ratio_redgrape", 0), acm=0.7)
    rows = {(r["reading"], r["setting"], r["against"]): r for r in bench.compare(tmp_path, REPO_ROOT / "config" / "mnist.yaml")}
    assert {k[0] for k in rows} == set(READINGS) and {k[1] for k in rows} == {"g10", "g50", "g100"}
    c = rows[("climb", "g50", "ratio_rel")]
    d = [10.0, 5.0, 20.0]                     # points: 80 - 70, 75 - 70, 90 - 70
    mean, sd = 35.0 / 3, (sum((x - 35.0 / 3) ** 2 for x in d) / 2) ** 0.5
    half = 4.302652729911275 * sd / 3 ** 0.5
    assert (c["experiment"], c["loss"], c["seeds"]) == ("readings", "ratio_climb", [0, 1, 2])
    assert (c["diff"], c["low"], c["high"]) == pytest.approx((mean, mean - half, mean + half), rel=1e-9)
    assert c["clear"] is (mean - half > 0)
    f = rows[("fedloge", "g50", "ratio_rel")]
    assert (f["loss"], f["diff"]) == ("ce", pytest.approx(-10.0, rel=1e-9)) and rows[("flower", "g50", "ratio_rel")]["diff"] == f["diff"]
    assert rows[("redgrape", "g50", "ratio_rel")]["n"] == 1 and "diff" not in rows[("redgrape", "g50", "ratio_rel")]
    assert rows[("climb", "g10", "ratio_rel")]["n"] == 0
    assert "| climb | readings/ratio_climb | 50 | ratio_rel | 3 | +11.67" in bench.markdown(list(rows.values()))


def test_fidelity_states_the_ce_reading_against_ratio_rel_as_the_set_gives_it() -> None:
    """docs/fidelity.md's FedLoGe sentence: CE's paired Ac.M difference to ratio_rel (and ratio) at each Γ of the
    readings family, as benchmarks/readings.py computes it from reference/mnist (seeds 0-2)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bench = load_script("benchmarks/readings.py", "readings_bench")
    rows = {(r["reading"], r["setting"], r["against"]): r
            for r in bench.compare(root / "reference" / "mnist", root / "config" / "mnist.yaml") if r["reading"] == "fedloge"}
    text = " ".join((root / "docs" / "fidelity.md").read_text().split())
    for g, clear in ((10, True), (50, True), (100, False)):
        r = rows[("fedloge", f"g{g}", "ratio_rel")]
        assert r["seeds"] == [0, 1, 2] and r["clear"] is clear, g
        assert f"Γ = {g}: {r['diff']:.2f} [{r['low']:.2f}, {r['high']:+.2f}]" in text, g
    paper = [f"{rows[('fedloge', f'g{g}', 'ratio')]['diff']:.2f}" for g in (10, 50, 100)]
    assert f"against the paper reading `ratio`, {paper[0]}, {paper[1]} and {paper[2]}." in text
