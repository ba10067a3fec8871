"""The docs' generated blocks hold what the reference set says, and the numbers they state are recomputed here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from fedbalance.monitor.estimators import shrunk_counts
from fedbalance.monitor.monitor import pooled_counts
from fedbalance.presentation import prose
from fedbalance.presentation.tables import published
from fedbalance.jobs.replay import recorded

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference" / "mnist"
DOCS = REPO / "docs"
SOURCE = "fedbalance reference docs"
RENDERED = {"fidelity", "claims", "reproduction", "rule-change", "job-times"}  # spliced by refdocs (tests/test_reference.py)


def block(page: Path, name: str) -> str:
    """The text between a page's marks of block ``name``."""
    m = re.search(rf"<!-- {re.escape(name)}: {re.escape(SOURCE)} -->\n(.*?)<!-- /{re.escape(name)} -->", page.read_text(), re.S)
    assert m, f"{page} has no block {name}"
    return m.group(1)


@pytest.fixture(scope="module")
def blocks() -> dict[str, tuple[str, str]]:
    return prose.blocks(REFERENCE)


@pytest.fixture(scope="module")
def jobs() -> pd.DataFrame:
    """One row per job of the set, read with plain pandas/json: final values (%) and the rounds."""
    rows = []
    for m in sorted(REFERENCE.glob("*/*/*/*/seed*/metrics.json")):
        exp, _, setting, loss, seed = m.parent.relative_to(REFERENCE).parts
        final = json.loads(m.read_text())["final"]
        rows.append({"experiment": exp, "setting": setting, "loss": loss, "seed": int(seed[4:]),
                     "acm": 100 * final["acc_minority"], "maj": 100 * final["acc_majority"],
                     "rounds": pd.read_csv(m.parent / "rounds.csv")})
    return pd.DataFrame(rows)


def test_every_generated_block_is_current(blocks) -> None:
    """Each prose block in its page equals what the set generates now (regenerate: python -m fedbalance reference docs)."""
    for name, (page, body) in blocks.items():
        assert block(DOCS / page, name) == body, f"docs/{page} block {name} is stale: run {SOURCE}"


def test_every_marked_block_is_generated(blocks) -> None:
    """No mark of ``fedbalance reference docs`` in docs/ is left without a generator."""
    marked = {m for p in DOCS.glob("*.md") for m in re.findall(rf"<!-- ([\w-]+): {re.escape(SOURCE)} -->", p.read_text())}
    assert marked == set(blocks) | RENDERED


def test_collapses_recomputed(jobs, blocks) -> None:
    """The collapsed rounds (test accuracy below 20 % after round 0) of the Ratio jobs, counted from rounds.csv."""
    ratio = jobs[(jobs.experiment == "losses") & jobs.loss.isin(["ratio", "ratio_rel"])]
    found = {(j.setting, j.loss, j.seed, int(r)) for j in ratio.itertuples()
             for r in j.rounds[(j.rounds["round"] > 0) & (j.rounds.acc < 0.2)]["round"]}
    final, rounds = prose.reference_frames(REFERENCE)
    got = {(k["setting"], k["loss"], k["seed"], k["round"]) for k in prose.collapses(rounds).to_dict("records")}
    assert got == found and len(found) >= 2
    text = blocks["seeds"][1]
    assert f"Of the reference set's {len(ratio)} `losses` Ratio jobs" in text
    jobs_hit = len({(s, loss, seed) for s, loss, seed, _ in found})
    assert f"{(ratio.loss == 'ratio').sum()} of the paper\n  reading), {jobs_hit} had a round" in text
    assert (f"; {len(found)} rounds in all)" in text) == (len(found) > jobs_hit)
    assert "the only collapse" not in (DOCS / "fidelity.md").read_text()
    listed = blocks["collapses"][1].split("\n- ")
    episodes = _episodes(found)
    assert len(listed) - 1 == len(episodes)  # one line an episode of consecutive collapsed rounds, after the opening
    for (setting, loss, seed), first, end in episodes:
        line = next(x for x in listed if f"/{setting}/{loss}/seed{seed}`: after round {first - 1} " in x)
        job = next(j for j in ratio.itertuples() if (j.setting, j.loss, j.seed) == (setting, loss, seed))
        _check_episode(line.replace("\n  ", " "), job.rounds, first, end)


def _episodes(found) -> list[tuple[tuple, int, int]]:
    """(job key, first round, last round) of each run of consecutive rounds in ``found`` ((*key, round) tuples)."""
    out: list[tuple[tuple, int, int]] = []
    for *key, r in sorted(found):
        if out and out[-1][0] == tuple(key) and out[-1][2] == r - 1:
            out[-1] = (out[-1][0], out[-1][1], r)
        else:
            out.append((tuple(key), r, r))
    return out


def _check_episode(line: str, rounds: pd.DataFrame, first: int, end: int, unit: str = "round") -> None:
    """The line of a collapse from ``first`` to ``end``: the class π weighed most and what it was in that round (a
    majority class: at or above the median count, by hand; every class as large at Γ = 1), the later rounds
    (``unit``s) below 20 %, the one after back above it or the job's end, in the job's own accuracies."""
    acc = dict(zip(rounds["round"], rounds.acc))
    assert f"{unit} {first} trained with it and ended at accuracy {100 * acc[first]:.2f} %" in line, line
    by_round = rounds.set_index("round")
    cls = int(np.argmax(json.loads(by_round.weights[first - 1])))
    counts = json.loads(by_round.true_composition[first])
    c, n = sorted(counts), len(counts)
    median = c[n // 2] if n % 2 else (c[n // 2 - 1] + c[n // 2]) / 2
    role = ("every class as large" if c[0] == c[-1] else
            "a majority class" if counts[cls] >= median else "a minority class")
    assert f"on class {cls}, {role}; {unit} {first} trained" in line, line
    if end == first + 1:
        assert f"; {unit} {end} stayed below 20 % ({100 * acc[end]:.2f} %)" in line, line
    elif end > first:
        later = [100 * acc[r] for r in range(first + 1, end + 1)]
        assert f"; {unit}s {first + 1}–{end} stayed below 20 % ({min(later):.2f}–{max(later):.2f} %)" in line, line
    else:
        assert "stayed below" not in line, line
    if end + 1 in acc:
        assert acc[end + 1] >= 0.2 and f"{unit} {end + 1} was back at {100 * acc[end + 1]:.2f} %" in line, line
    else:
        assert f"the job's last {unit}" in line and "was back at" not in line, line


def test_centralised_collapses_recomputed(jobs, blocks) -> None:
    """docs/deviations.md: every centralised Ratio job (both readings) with an epoch below 20 % test accuracy after
    epoch 0, one line a run of such epochs, with its π: recomputed from rounds.csv."""
    ratio = jobs[(jobs.experiment == "centralised") & jobs.loss.isin(["ratio", "ratio_rel"])]
    found = {(j.setting, j.loss, j.seed, int(r)) for j in ratio.itertuples()
             for r in j.rounds[(j.rounds["round"] > 0) & (j.rounds.acc < 0.2)]["round"]}
    assert found  # the set holds at least the diverged g1 ratio seed 0 (docs/deviations.md)
    text = blocks["centralised-collapses"][1]
    n_jobs = len({k[:3] for k in found})
    assert f"Of the set's {len(ratio)} `centralised` Ratio job" in text
    assert f"{(ratio.loss == 'ratio').sum()} of the paper reading, `ratio`, and {(ratio.loss == 'ratio_rel').sum()} of the" in text
    assert f"`ratio_rel`), {n_jobs} had an epoch whose test accuracy fell below 20 %" in text
    assert (f"({len(found)} epochs in all;" in text) == (len(found) > n_jobs)
    listed = text.split("\n- ")[1:]
    episodes = _episodes(found)
    assert len(listed) == len(episodes)
    for (setting, loss, seed), first, end in episodes:
        line = next(x for x in listed if x.startswith(f"`reference/mnist/centralised/mnist/{setting}/{loss}/seed{seed}`: "
                                                      f"after epoch {first - 1} "))
        job = next(j for j in ratio.itertuples() if (j.setting, j.loss, j.seed) == (setting, loss, seed))
        pi = json.loads(job.rounds.set_index("round").weights[first - 1])
        flat = line.replace("\n  ", " ")
        assert f"the monitor's π put {max(pi):.1f} on class {int(np.argmax(pi))}," in flat, flat
        _check_episode(flat, job.rounds, first, end, unit="epoch")


def test_sweep_collapses_recomputed(jobs, blocks) -> None:
    """The α and β sweeps' collapsed rounds (test accuracy below 20 % after round 0), counted from rounds.csv, each
    named in the block with its round and its job's final Ac.M."""
    sweeps = jobs[jobs.experiment.isin(["alpha", "beta"])]
    found = [(j.experiment, j.setting, j.seed, int(r), j.acm) for j in sweeps.itertuples()
             for r in j.rounds[(j.rounds["round"] > 0) & (j.rounds.acc < 0.2)]["round"]]
    text = blocks["sweep-collapses"][1]
    if not found:
        assert text.startswith(f"None of the set's {len(sweeps)} trained jobs of the two sweeps")
    else:
        assert f"Of the set's {len(sweeps)} trained jobs of the two sweeps" in text
        hit = len({(exp, setting, seed) for exp, setting, seed, _, _ in found})
        assert f"\n{hit} had a round whose test accuracy fell below 20 %" in text
        assert (f"({len(found)} rounds in all)" in text) == (len(found) > hit)
    for (exp, setting, seed), first, end in _episodes((exp, setting, seed, r) for exp, setting, seed, r, _ in found):
        line = next(x for x in text.split("\n- ")[1:] if x.startswith(f"`reference/mnist/{exp}/mnist/{setting}/ratio/seed{seed}`")
                    and f"after round {first - 1} " in x)
        job = next(j for j in sweeps.itertuples() if (j.experiment, j.setting, j.seed) == (exp, setting, seed))
        flat = line.replace("\n  ", " ")
        assert f"Ac.M {job.acm:.2f}." in flat or f"its final Ac.M is {job.acm:.2f}." in flat, flat
        _check_episode(flat, job.rounds, first, end)


def test_mismatch_block_recomputed(jobs, blocks) -> None:
    """The Γ = 10 mismatch rows (final Ac.M over seeds, the last-five mean) and the count of sign changes of the
    round-to-round Ac.M, from metrics.json and rounds.csv with plain pandas."""
    mm = jobs[(jobs.experiment == "mismatch") & jobs.setting.str.endswith("_g10")]
    text = blocks["mismatch"][1]
    if mm.empty:
        assert text.startswith("The set has no `mismatch` job at Γ = 10")
        return
    assert f"The set's {len(mm)} `mismatch` jobs at Γ = 10" in text
    names = {"ce": "CE", "focal": "Focal", "ghmc": "GHM-C", "ratio": "Ratio"}
    for (setting, loss), g in mm.groupby(["setting", "loss"]):
        c = int(setting.split("_")[0][1:])
        last5 = np.mean([100 * r.acc_minority.tail(5).mean() for r in g.rounds])
        row = next(x for x in text.splitlines() if x.startswith(f"| {c} | ") and f"| {names[loss]} | {len(g)}<!-- seeds " in x)
        assert f"| {g.acm.mean():.2f} ± " in row and f"| {last5:.2f} |" in row, row
    for setting, g in mm.groupby("setting"):
        def count(rs: pd.Series) -> tuple[int, int]:
            changes = [np.diff(r.acc_minority.to_numpy()[-11:]) for r in rs]
            k = sum(int(((d[1:] > 0) & (d[:-1] < 0)).sum() + ((d[1:] < 0) & (d[:-1] > 0)).sum()) for d in changes)
            return k, sum(len(d) - 1 for d in changes)
        (k, n), (kr, nr) = count(g[g.loss != "ratio"].rounds), count(g[g.loss == "ratio"].rounds)
        assert f"{k} of {n} (CE, Focal and GHM-C) and {kr} of {nr} (Ratio) at {int(setting.split('_')[0][1:])} classes per client" in text
        best = g.groupby("loss").acm.mean().idxmax()
        assert f"**{int(setting.split('_')[0][1:])} classes per client**: best mean final Ac.M {names[best]}" in text


def test_early_block_recomputed(jobs, blocks) -> None:
    """Each `early` setting's final Ac.M and the minority accuracy either side of its switch (from each job's
    metrics.json config), read with plain pandas/json."""
    early = jobs[jobs.experiment == "early"]
    text = blocks["early"][1]
    if early.empty:
        assert text.startswith("The set has no `early` job")
        return
    for setting, g in early.groupby("setting"):
        switch = {json.loads((REFERENCE / "early" / "mnist" / setting / j.loss / f"seed{j.seed}" / "metrics.json").read_text())
                  ["config"]["switch_round"] for j in g.itertuples()}
        assert len(switch) == 1
        t = switch.pop()
        before = [100 * r.set_index("round").acc_minority[t - 1] for r in g.rounds]
        after = [100 * r.set_index("round").acc_minority[t] for r in g.rounds]
        row = next(x for x in text.splitlines() if x.startswith(f"| {setting}: round {t} of "))
        assert f"| {g.acm.mean():.2f} ± {g.acm.std():.2f} |" in row, row
        assert f"| {min(before):.2f}–{max(before):.2f} | {min(after):.2f}–{max(after):.2f} |" in row, row
        assert min(after) > max(before)


def test_majority_claim_recomputed(jobs, blocks) -> None:
    """Claims 15 and 15r as the seeds block states them: per Γ, each reading's majority accuracy minus CE's plus one
    point, seed by seed on the seeds every loss of the Γ holds, clear when its 95 % t interval (scipy) lies above
    zero; from metrics.json."""
    from scipy import stats

    losses = jobs[jobs.experiment == "losses"]
    settings = sorted(losses.setting.unique(), key=lambda s: int(s[1:]))
    text = " ".join(blocks["seeds"][1].split())
    for reading, name in (("ratio", "the paper reading"), ("ratio_rel", "the released reading")):
        clear, above, below = [], [], []
        for s in settings:
            cell = losses[losses.setting == s]
            common = set.intersection(*(set(g.seed) for _, g in cell.groupby("loss")))
            maj = {loss: cell[(cell.loss == loss) & cell.seed.isin(common)].set_index("seed").maj.sort_index()
                   for loss in (reading, "ce")}
            d = (maj[reading] - maj["ce"] + 1.0).to_numpy()
            low = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))[0]
            (clear if low > 0 else above if d.mean() >= 0 else below).append((s, maj, common))
        part = name + (f" clear at Γ = {', '.join(s[1:] for s, _, _ in clear)}" if clear else "")
        assert part in text, part
        for s, maj, common in below:
            run = sorted(common)  # a run of three or more seeds prints as "first–last" (0–2, 0–3), else one by one
            seeds = f"{run[0]}–{run[-1]}" if len(run) > 2 and run == list(range(run[0], run[-1] + 1)) else ", ".join(map(str, run))
            assert (f"Γ = {s[1:]} ({maj[reading].mean():.2f} against CE's {maj['ce'].mean():.2f} on seeds {seeds})"
                    in text)
        if reading == "ratio":
            assert [s for s, _, _ in below] == ["g20"] and [s for s, _, _ in above] == ["g1", "g10"]
            assert "not clear, above the margin on the mean, at Γ = 1, 10" in text


def test_ghmc_gaps_recomputed(jobs, blocks) -> None:
    """GHM-C's distance to its published cells runs over a range; only its sign is the same at every Γ."""
    pub = published()
    column = {"g1": "B.", "g10": "10:1", "g20": "20:1", "g50": "50:1", "g100": "100:1"}
    g = jobs[(jobs.experiment == "losses") & (jobs.loss == "ghmc")].groupby("setting").acm.mean()
    gaps = [g[s] - float(pub[(pub.table == "Res_3_datasets") & (pub.dataset == "mnist") & (pub.column == c)
                             & (pub.row == "ghmc") & (pub.metric == "acm")].value.iloc[0]) for s, c in column.items()]
    assert all(x > 0 for x in gaps) and max(gaps) - min(gaps) > 10
    text = " ".join(blocks["seeds"][1].split())
    assert f"ends above its published cell at every Γ, by {min(gaps):.1f} to {max(gaps):.1f} points" in text


def test_shrinkage_statistic_matches_the_estimator() -> None:
    """prose's ||p - u||^2 / noise, from rounds.csv, passes 4 exactly where the library's ``shrunk`` leaves the guess."""
    _, rounds = prose.reference_frames(REFERENCE)
    ratios = prose.shrinkage_ratios(rounds)
    for exp, setting, loss, seed in [("monitor", "default", "ce", 0), ("losses", "g10", "ce", 3), ("losses", "g1", "ce", 0)]:
        mine = ratios[(ratios.experiment == exp) & (ratios.setting == setting) & (ratios.loss == loss)
                      & (ratios.seed == seed)].set_index("round").ratio
        for row in recorded(REFERENCE / exp / "mnist" / setting / loss / f"seed{seed}", ["pooled", "shrunk"])[1:]:
            est = np.array(row["est_shrunk"])
            assert (not np.allclose(est, est.mean())) == (mine[row["round"]] > prose.EVIDENCE), (exp, setting, seed, row["round"])


def test_shrunk_false_alarm_rate() -> None:
    """Under a uniform composition with the same clients, ``shrunk`` leaves the guess in about 2 % of round-1 draws
    and under 1 % at round 2 (docs/monitor.md)."""
    rng = np.random.default_rng(0)
    clients, q = 20, 10
    rates = {}
    for t, draws in ((2, 3000), (3, 3000)):
        hits = 0
        for _ in range(draws):
            raw = 20000 / q + 200 * rng.standard_normal((t, q))
            hits += shrunk_counts(torch.tensor(raw), [list(range(clients))] * t, [1000.0] * clients)[1] > 0
        rates[t] = hits / draws
    assert 0.01 < rates[2] < 0.03
    assert rates[3] < 0.01


def test_the_uniform_guess_weighs_lambda_over_k() -> None:
    """One round of K fixed clients: the pooled sum is (K v + U) / (K + 1), the guess worth 1/K of the round (λ = 1)."""
    k, q = 20, 10
    v = torch.tensor([3000.0, 1000, 2000, 2000, 2000, 2000, 2000, 2000, 2000, 2000], dtype=torch.float64)
    got = pooled_counts(v[None], [list(range(k))], [1000.0] * k)
    u = torch.full((q,), 2000.0, dtype=torch.float64)
    assert torch.allclose(got.double(), (k * v + u) / (k + 1), atol=1e-6)


def test_auc_fits_recomputed(blocks) -> None:
    """The published cells the one-hot closed form fits, recounted from the published numbers."""
    pub = published()
    maj = pub[pub.table.isin(["Sup_majority", "Sup_majority_femnist"])]
    counts: dict[tuple[str, int], int] = {}
    for r in maj.itertuples():
        table = "FL_FEMNIST" if r.dataset == "femnist" else "Res_3_datasets"
        cell = pub[(pub.table == table) & (pub.dataset == r.dataset) & (pub.column == r.column) & (pub.row == r.row)]
        acm, auc = (float(cell[cell.metric == m].value.iloc[0]) for m in ("acm", "auc"))
        classes, minority = {"mnist": (10, 3), "cifar10": (10, 3), "fer2013": (7, 3), "femnist": (26, 7)}[r.dataset]
        acc = (minority * acm + (classes - minority) * r.value) / classes / 100
        for q in (classes, 26):
            counts[r.dataset, q] = counts.get((r.dataset, q), 0) + int(abs((1 + acc - (1 - acc) / (q - 1)) / 2 - auc) <= 0.001)
    text = " ".join(blocks["auc-fits"][1].split())
    assert f"{counts['mnist', 10]} of 20 MNIST cells" in text and f"{counts['cifar10', 10]} of 20 CIFAR10 cells" in text
    assert f"{counts['fer2013', 26]} of 20 Fer2013," in text


def _where(values: list[float], paper: float, width: float) -> str:
    """Where ``paper`` lies against the Student-t 95 % interval of ``values``' mean, computed here with scipy."""
    from scipy import stats

    low, high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    if paper > high:
        return "above the 95 % interval"
    if paper < low:
        return "below the 95 % interval"
    return "inside the 95 % interval" if high - low <= width else "inside a 95 % interval too wide to tell (undetermined)"


def test_seeds_block_places_published_cells_by_the_tables_rule(jobs, blocks) -> None:
    """The seeds block says where a published cell lies as the fidelity table does (the 95 % interval, not two
    standard deviations), recomputed with scipy from metrics.json."""
    text = " ".join(blocks["seeds"][1].split())
    assert "two standard deviations" not in text and "spread;" not in text
    pub = published()
    losses = jobs[jobs.experiment == "losses"]

    def paper(column: str, metric: str = "acm") -> float:
        return float(pub[(pub.table == "Res_3_datasets") & (pub.dataset == "mnist") & (pub.column == column)
                         & (pub.row == "ratio") & (pub.metric == metric)].value.iloc[0])

    r10 = losses[(losses.setting == "g10") & (losses.loss == "ratio")].acm.tolist()
    rel10 = losses[(losses.setting == "g10") & (losses.loss == "ratio_rel")].acm.tolist()
    assert (f"The published Ratio cell is {_where(r10, paper('10:1'), 5.0)} of the paper reading's mean and "
            f"{_where(rel10, paper('10:1'), 5.0)} of the released reading's.") in text
    r100 = losses[(losses.setting == "g100") & (losses.loss == "ratio")].acm.tolist()
    assert f"the published 56.50 is **{_where(r100, paper('100:1'), 5.0)}** of its mean" in text


def test_seeds_block_without_the_collapse(jobs) -> None:
    """Rendered from the set less the Γ = 20 collapsed seed, the block no longer blames a collapse and places the
    published cell against the other seeds, as scipy does."""
    final, rounds = prose.reference_frames(REFERENCE)
    gone = {(k["setting"], k["loss"], k["seed"]) for k in prose.collapses(rounds).to_dict("records") if k["setting"] == "g20"}
    assert gone

    def keep(f: pd.DataFrame) -> pd.Series:
        return ~pd.Series([(f.experiment.iloc[i] == "losses") and (s, l, d) in gone
                           for i, (s, l, d) in enumerate(zip(f.setting, f.loss, f.seed))], index=f.index)

    text = " ".join(prose.render("seeds.md.j2", prose.seeds_context(final[keep(final)], rounds[keep(rounds)])).split())
    assert "holds that collapse" not in text and "holds those collapses" not in text and "collapsed to accuracy" not in text
    at20 = jobs[(jobs.experiment == "losses") & (jobs.setting == "g20")]
    at20 = at20[[(s, l, d) not in gone for s, l, d in zip(at20.setting, at20.loss, at20.seed)]]
    common = set.intersection(*(set(g.seed) for _, g in at20.groupby("loss")))  # every loss read on these seeds
    g20 = at20[(at20.loss == "ratio") & at20.seed.isin(common)].sort_values("seed")
    values = list(g20.acm)
    cell = float(published().query("table == 'Res_3_datasets' and dataset == 'mnist' and column == '20:1' and row == 'ratio' "
                                   "and metric == 'acm'").value.iloc[0])
    assert f"end at {', '.join(f'{v:.2f}' for v in values)}. The published {cell:.2f} is {_where(values, cell, 5.0)} of its mean." in text
    full = " ".join(prose.render("seeds.md.j2", prose.seeds_context(final, rounds)).split())
    hit = {d for s, l, d in gone if l == "ratio"}
    one = len(hit) == 1
    assert f"holds {'that collapse' if one else 'those collapses'}; without {'it' if one else 'them'} the published" in full


def test_cuda_against_cpu_prediction_intervals() -> None:
    """reference/README.md: each CUDA job's Ac.M against the 95 % prediction interval of one more seed from its
    cell's CPU seeds 0-2 (mean ± t · std · sqrt(1 + 1/3), t by hand), recomputed from the two sets' metrics.json."""
    text = " ".join((REPO / "reference" / "README.md").read_text().split())
    inside, outside = [], []
    for m in sorted((REPO / "reference" / "cuda-vs-cpu").glob("losses/mnist/*/*/seed0/metrics.json")):
        setting, loss = m.parts[-4], m.parts[-3]
        cuda = 100 * json.loads(m.read_text())["final"]["acc_minority"]
        cpu = [100 * json.loads((REFERENCE / "losses" / "mnist" / setting / loss / f"seed{s}" / "metrics.json").read_text())
               ["final"]["acc_minority"] for s in (0, 1, 2)]
        half = 4.302652729911275 * float(np.std(cpu, ddof=1)) * (4 / 3) ** 0.5
        lo, hi = float(np.mean(cpu)) - half, float(np.mean(cpu)) + half
        interval = f"[{lo:.2f}, {hi:.2f}]"
        (inside if lo <= cuda <= hi else outside).append(f"{setting}/{loss}")
        assert interval in text, (setting, loss, interval)
    assert len(inside) == 4 and outside == ["g10/ratio"]
    assert "Four of the five CUDA values of Ac.M lie inside the 95 % prediction interval" in text


def test_reference_readme_status_is_current() -> None:
    """reference/README.md's status table is what the set holds now (``status_text``), recounted here from the job
    folders: every (experiment, setting, loss) with its seeds, and the number of jobs."""
    from fedbalance.evidence.refset import STATUS_SOURCE, status_text

    text = (REPO / "reference" / "README.md").read_text()
    m = re.search(rf"<!-- status: {re.escape(STATUS_SOURCE)} -->\n(.*?)<!-- /status -->", text, re.S)
    assert m and m.group(1) == status_text(REFERENCE), "stale: run python -m fedbalance reference docs (or status --readme)"
    held: dict[tuple[str, str, str], set[int]] = {}
    for p in REFERENCE.glob("*/*/*/*/seed*/provenance.json"):
        exp, _, setting, loss, seed = p.parent.relative_to(REFERENCE).parts
        held.setdefault((exp, setting, loss), set()).add(int(seed[4:]))
    for (exp, setting, loss), seeds in held.items():
        assert f"| {exp} | mnist | {setting} | {loss} | {', '.join(map(str, sorted(seeds)))} |" in m.group(1)
    assert f"\n{sum(map(len, held.values()))} jobs, made by " in m.group(1)



def test_job_times_recomputed() -> None:
    """docs/performance.md's table of the set's wall times and the README's line: every row recomputed from the job
    folders with json and ``statistics`` (quartiles by its inclusive method, numpy's linear interpolation), derived
    jobs left out."""
    import statistics

    minutes: dict[tuple[str, str], list[float]] = {}
    for p in sorted(REFERENCE.glob("*/*/*/*/seed*/provenance.json")):
        record = json.loads(p.read_text())
        if "derived_from" in record:
            continue
        metrics = json.loads((p.parent / "metrics.json").read_text())
        device = record.get("runtime", {}).get("device") or metrics["device"]
        minutes.setdefault((device, p.parent.relative_to(REFERENCE).parts[0]), []).append(metrics["wall_time_s"] / 60)
    text = block(DOCS / "performance.md", "job-times")
    devices = {d for d, _ in minutes}
    for key in [*minutes, *((d, None) for d in devices)]:
        values = minutes[key] if key[1] else [v for (d, _), vs in minutes.items() if d == key[0] for v in vs]
        q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
        assert statistics.median(values) == pytest.approx(med)
        family = f"`{key[1]}`" if key[1] else "**all**"
        row = f"| {key[0]} | {family} | {len(values)} | {med:.1f} | {q1:.1f}–{q3:.1f} | {max(values):.1f} |"
        assert row in text, row
    assert text.count("\n| ") == len(minutes) + len(devices) + 1  # the head, one row a family and device, one "all"
    cpu = [v for (d, _), vs in minutes.items() if d == "cpu" for v in vs]
    readme = " ".join(block(REPO / "README.md", "job-times").split())
    assert (f"the {len(cpu)} trained CPU jobs of reference/mnist took a median of {statistics.median(cpu):.0f} "
            f"minutes each") in readme


def test_job_times_by_hand() -> None:
    """Six jobs: four CPU jobs of 1, 2, 3 and 4 minutes (one branched), one derived (left out), one CUDA job of half a
    minute; the CPU median 2.5, quartiles 1.75 and 3.25 by hand."""
    jobs = pd.DataFrame([("losses", "cpu", 60, False, False), ("losses", "cpu", 240, False, False),
                         ("early", "cpu", 120, False, True), ("early", "cpu", 180, False, False),
                         ("t_ra", "cpu", 999, True, False), ("losses", "cuda (NVIDIA H200)", 30, False, False)],
                        columns=["experiment", "device", "wall_time_s", "derived", "branched"]).assign(
        threads=1, cores=2, process_wall_s=None, process_cpu_s=None)
    c = prose.job_time_context(jobs)
    assert (c["derived"], c["branched"], c["without"], c["threads"], c["cores"]) == (1, 1, 0, [1], [2])
    assert c["cpu"] == {"jobs": 4, "median": 2.5, "q1": 1.75, "q3": 3.25, "max": 4.0}
    assert [g["device"] for g in c["groups"]] == ["cpu", "cuda (NVIDIA H200)"]
    rows = {r["experiment"]: r for r in c["groups"][0]["rows"]}
    assert rows["losses"]["median"] == 2.5 and rows["early"]["median"] == 2.5 and "t_ra" not in rows
    assert c["groups"][1]["all"] == {"jobs": 1, "median": 0.5, "q1": 0.5, "q3": 0.5, "max": 0.5}
    text = prose.render("job_times.md.j2", c)
    assert "| cpu | **all** | 4 | 2.5 | 1.8–3.2 | 4.0 |" in text  # 1.75 and 3.25 rounded half to even
    assert "The 1 derived job (`derived_from`" in text and "The 1 branched job (`branched_from`) counts whole" in text
    readme = " ".join(prose.render("job_times_readme.md.j2", c).split())
    assert "the 4 trained CPU jobs of reference/mnist took a median of 2 minutes each (quartiles 2–3, longest 4" in readme
    old = prose.job_time_context(jobs.assign(threads=None, cores=None))  # records that name neither
    assert (old["threads"], old["cores"]) == ([], []) and old["cpu"] == c["cpu"]
    assert "torch thread" not in prose.render("job_times.md.j2", old) + prose.render("job_times_readme.md.j2", old)
    assert c["core_share"] is None and "is not recorded" in readme


def test_job_times_core_share_by_hand() -> None:
    """Three CPU jobs record their process's seconds: 600 CPU s over 1,000 wall s on one thread (60 %), 1,800 over
    1,000 on two threads (90 %), 300 over 1,000 on one (30 %): median 60 %; a fourth, older, records none, a derived
    one and a CUDA one are not read."""
    jobs = pd.DataFrame([("losses", "cpu", 1000, False, 1, 1000, 600), ("losses", "cpu", 1000, False, 2, 1000, 1800),
                         ("early", "cpu", 1000, False, 1, 1000, 300), ("early", "cpu", 900, False, 1, None, None),
                         ("t_ra", "cpu", 9, True, 1, 9, 1), ("losses", "cuda (NVIDIA H200)", 30, False, 1, 30, 30)],
                        columns=["experiment", "device", "wall_time_s", "derived", "threads", "process_wall_s",
                                 "process_cpu_s"]).assign(branched=False, cores=2)
    c = prose.job_time_context(jobs)
    assert c["core_share"] == {"jobs": 3, "median": pytest.approx(60.0)}
    text = " ".join(prose.render("job_times.md.j2", c).split())
    assert ("3 of them record the CPU seconds their process used (`cpu_s_this_process`): a median of 60 % of their "
            "wall time on each torch thread") in text and "the others, recorded before it" in text
    readme = " ".join(prose.render("job_times_readme.md.j2", c).split())
    assert "the 3 that record their CPU seconds had a median of 60 % of a core a thread" in readme
    assert "not recorded" not in readme
