"""Every sentence of docs/fidelity.md and docs/ratio-stability.md about a pattern holds for all the jobs it names:
recomputed here from the committed jobs' metrics.json and rounds.csv with plain json/pandas, not by prose's code."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedbalance.presentation.prose import COLLAPSE
from fedbalance.presentation.tables import published

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference" / "mnist"
FIDELITY = REPO / "docs" / "fidelity.md"
STABILITY = REPO / "docs" / "ratio-stability.md"
NAMES = {"ce": "CE", "focal": "Focal", "ghmc": "GHM-C", "ratio": "Ratio", "mse": "MSE", "mfe": "MFE"}


def flat(text: str) -> str:
    """Text with its line breaks and runs of spaces made single spaces."""
    return " ".join(text.split())


def v_span(seeds) -> str:
    """Seeds as the pages print them: '0–4' for a run of three or more, else '0, 3'."""
    s = sorted(seeds)
    return f"{s[0]}–{s[-1]}" if len(s) > 2 and s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


def block(text: str, name: str) -> str:
    """A generated block's body in a page's text, as a reader sees it: without its seed marks (HTML comments that
    tests/test_seed_marks.py checks)."""
    m = re.search(rf"<!-- {name}: fedbalance reference docs -->\n(.*?)<!-- /{name} -->", text, re.S)
    assert m, name
    return re.sub(r"<!-- seeds [^>]*-->", "", m.group(1))


@pytest.fixture(scope="module")
def jobs() -> dict[tuple[str, str, str, int], pd.DataFrame]:
    """(experiment, setting, loss, seed) -> the job's rounds.csv, for every job of the set."""
    out = {}
    for m in sorted(REFERENCE.glob("*/*/*/*/seed*/metrics.json")):
        exp, _, setting, loss, seed = m.parent.relative_to(REFERENCE).parts
        out[exp, setting, loss, int(seed[4:])] = pd.read_csv(m.parent / "rounds.csv").sort_values("round")
    return out


@pytest.fixture(scope="module")
def fidelity() -> str:
    return FIDELITY.read_text()


def seeds_of(jobs: dict, exp: str, setting: str, loss: str) -> list[int]:
    return sorted(k[3] for k in jobs if k[:3] == (exp, setting, loss))


def seed_words(seeds: list[int]) -> str:
    return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))


def slope(y: list[float]) -> float:
    """Least-squares slope of y against 0, 1, 2, ... in closed form."""
    x = list(range(len(y)))
    mx, my = sum(x) / len(x), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def state(y: list[float]) -> str:
    """The documented state of a job's last five rounds of Ac.M (in points), tested in the documented order."""
    steps = [b - a for a, b in zip(y, y[1:])]
    if all(v < 1 for v in y):
        return "at 0"
    if max(y) - min(y) <= 2:
        return "settled"
    if all(a * b < 0 for a, b in zip(steps, steps[1:])) and all(abs(s) > 2 for s in steps):
        return "alternates"
    s = slope(y)
    return "rises" if s >= 0.5 else "falls" if s <= -0.5 else "wavers"


def test_mismatch_alternation_names_its_jobs(jobs, fidelity) -> None:
    """Which mismatch jobs alternate over rounds 19–29 (at least 90 % of their pairs of successive changes change
    sign), named by loss and seed level by level, with the jobs that do not; the old sentence about a whole level is gone."""
    text = flat(block(fidelity, "mismatch"))
    assert "the global model alternates between rounds" not in fidelity
    assert "(rounds 19–29, a job's last 10 changes of Ac.M)" in text
    levels = sorted({k[1] for k in jobs if k[0] == "mismatch" and k[1].endswith("_g10")}, key=lambda s: -int(s[1:].split("_")[0]))
    for setting in levels:
        c = int(setting[1:].split("_")[0])
        line = re.search(rf"- {c} classes per client: (.*?)(?= - \d classes per client:| - \*\*Collapses|$)", text).group(1)
        alt, steady, tot = {}, [], [0, 0, 0, 0]
        for loss in ("ce", "focal", "ghmc", "ratio"):
            for seed in seeds_of(jobs, "mismatch", setting, loss):
                a = list(jobs["mismatch", setting, loss, seed].acc_minority)
                d = [b - x for x, b in zip(a, a[1:])]
                pairs = list(zip(d, d[1:]))
                last = pairs[-9:]
                k = sum(1 for u, v in last if (u > 0 > v) or (u < 0 < v))
                if k >= 0.9 * len(last):
                    alt.setdefault(loss, []).append((seed, k))
                    tot[0] += sum(1 for u, v in pairs if (u > 0 > v) or (u < 0 < v))
                    tot[1] += len(pairs)
                    tot[2] += sum(1 for u, v in pairs if ((u > 0 > v) or (u < 0 < v)) and u and v)
                    tot[3] += sum(1 for u, v in pairs if u and v)
                else:
                    steady.append((loss, seed, k))
        if not alt:
            assert line.startswith("no job alternates"), line
            continue
        for loss, ss in alt.items():
            assert f"{NAMES[loss]} {seed_words([s for s, _ in ss])} ({', '.join(str(k) for _, k in ss)} of 9)" in line, line
        for loss, seed, k in steady:
            assert f"{NAMES[loss]} seed {seed} ({k} of 9" in line, (loss, seed, line)
        assert f"change sign at {tot[0]} of {tot[1]} pairs, at {tot[2]} of the {tot[3]}" in line


def test_mfe_states_recomputed(jobs, fidelity) -> None:
    """Each `mfe` job's state over rounds 25–29 and the final round's spread over seeds, MSE against MFE; the old
    "MFE has converged" and "MSE's seeds spread widely" sentences are gone."""
    assert "while MFE has converged" not in fidelity and "its seeds spread widely" not in fidelity
    text = block(fidelity, "mfe")
    std = {}
    for setting in sorted({k[1] for k in jobs if k[0] == "mfe"}, key=lambda s: -int(s[1:])):
        c = int(setting[1:])
        for loss in ("mse", "mfe"):
            seeds = seeds_of(jobs, "mfe", setting, loss)
            rs = [jobs["mfe", setting, loss, s] for s in seeds]
            assert all(list(r["round"].tail(5)) == [25, 26, 27, 28, 29] for r in rs)
            states = [state([100 * v for v in r.acc_minority.tail(5)]) for r in rs]
            final = [100 * r.acc_minority.iloc[-1] for r in rs]
            std[c, loss] = statistics.stdev(final)
            row = next(x for x in text.splitlines() if x.startswith(f"| {c} | ") and f"| {NAMES[loss]} | {len(seeds)} |" in x)
            got = re.findall(r"(at 0|settled|alternates|rises|falls|wavers) \(", row)
            assert got == states, (c, loss, row)
        if (c, "mse") in std and (c, "mfe") in std:
            wider = std[c, "mse"] > std[c, "mfe"]
            assert f"{std[c, 'mse']:.2f} against {std[c, 'mfe']:.2f} at {c} classes per client" in flat(text)
            verdict = re.search(r"MSE's seeds spread more than MFE's at ([\d, ]+) classes per client", flat(text))
            assert (verdict is not None and str(c) in verdict.group(1).split(", ")) == wider
    # the levels where MFE settled and where it alternates, as the bullet names them
    mfe_line = flat(next(x for x in text.split("\n- ") if x.startswith("**MFE, rounds 25–29**")))
    for setting in sorted({k[1] for k in jobs if k[0] == "mfe"}):
        states = {state([100 * v for v in jobs["mfe", setting, "mfe", s].acc_minority.tail(5)]) for s in seeds_of(jobs, "mfe", setting, "mfe")}
        for st in states:
            assert re.search(rf"{st} at [^;]*\b{setting[1:]} classes per client", mfe_line), (setting, st, mfe_line)


def test_sweep_slopes_recomputed(jobs, fidelity) -> None:
    """The slope of Ac.M over rounds 25–29 of CE and the Ratio Loss at Γ = 50 and of the sweep values, seed by seed,
    in closed form; the old "still rising at round 30" for the Ratio Loss at α = 1 is gone."""
    assert "still rising at round 30" not in fidelity and "levels off" not in fidelity
    text = block(fidelity, "sweep-slopes")
    cases = [("losses", "g50", "ce", "CE"), ("losses", "g50", "ratio", "Ratio, α = 1.00, β = 0.10")]
    cases += [(e, s, "ratio", f"Ratio, {'α' if e == 'alpha' else 'β'} = {float(s[1:]):.2f}")
              for e in ("alpha", "beta") for s in sorted({k[1] for k in jobs if k[0] == e})]
    states = {}
    for exp, setting, loss, label in cases:
        seeds = seeds_of(jobs, exp, setting, loss)
        tails = [[100 * v for v in jobs[exp, setting, loss, s].acc_minority.tail(5)] for s in seeds]
        row = next(x for x in text.splitlines() if x.startswith(f"| {label} (`{exp}/mnist/{setting}/{loss}`)"))
        assert f"| {', '.join(f'{slope(t):+.2f}' for t in tails)} |" in row, row
        assert f"| {', '.join(state(t) for t in tails)} |" in row, row
        states[label] = dict(zip(seeds, (state(t) for t in tails)))
    # the rising jobs, as the bullet names them
    rising = flat(next(x for x in text.split("\n- ") if x.startswith("**rises**")))
    for label, by_seed in states.items():
        up = [s for s, st in by_seed.items() if st == "rises"]
        assert (f"{label} ({seed_words(up)})" in rising) == bool(up), (label, rising)
    # α = 5.00 against the paper's cell, seed by seed (the hand-written sentence under the block)
    after = flat(fidelity.split("<!-- /sweep-slopes -->")[1].split("- **A large β")[0])
    pub = published()
    paper = float(pub[(pub.table == "Sup_hyper_a") & (pub.dataset == "mnist") & (pub.column == "5.00") & (pub.metric == "acm")].value.iloc[0])
    assert f"(Ac.M {paper:.2f})" in after
    runs = {s: jobs["alpha", "a5", "ratio", s] for s in seeds_of(jobs, "alpha", "a5", "ratio")}
    final = {s: 100 * r.acc_minority.iloc[-1] for s, r in runs.items()}
    above = [s for s, v in final.items() if v > paper]
    assert f"{seed_words(above)} end above it (Ac.M {', '.join(f'{final[s]:.1f}' for s in above)} in round {runs[above[0]]['round'].iloc[-1]})" in after
    below = [s for s in final if s not in above]
    n = {3: "three", 4: "four", 5: "five"}[len(final)]
    assert len(below) == 1 and f"at one seed of {n} here" in after
    dead = runs[below[0]]
    low = dead.acc.to_numpy() < COLLAPSE
    start = next(i for i in range(len(low)) if low[i:].all())   # the first round from which every round has collapsed
    row = dead.iloc[start]
    assert f"{seed_words(below)} diverged: in round {row['round']} its training loss jumped to {row.train_loss:.2f}" in after
    assert (dead.acc_minority.iloc[start:] == 0).all() and dead.train_loss.iloc[:start].max() < row.train_loss
    assert f"the mean over the {n} ({statistics.mean(final.values()):.1f}) stays above" in after
    assert statistics.mean(final.values()) > paper


def test_t_ra_mean_cs_recomputed(jobs, fidelity) -> None:
    """The `paper` estimator's mean CS per T_Ra and seed; where the mean over the common seeds and over each value's own
    seeds rises, and where a seed falls; the old "rises with T_Ra over the whole range" is gone."""
    assert "over the whole range" not in fidelity
    text = flat(block(fidelity, "t-ra"))
    cs: dict[float, dict[int, float]] = {}
    for (exp, setting, loss, seed), r in jobs.items():
        if exp == "t_ra" or (exp, setting) == ("monitor", "default"):
            cs.setdefault(1.25 if exp == "monitor" else float(setting[1:]), {})[seed] = r.cs_paper.dropna().mean()
    values = sorted(cs)
    common = sorted(set.intersection(*(set(d) for d in cs.values())))
    on_common = [sum(cs[v][s] for s in common) / len(common) for v in values]
    own = [sum(cs[v].values()) / len(cs[v]) for v in values]
    falls_common = [(a, b) for a, b, x, y in zip(values, values[1:], on_common, on_common[1:]) if y <= x]
    falls_own = [(a, b) for a, b, x, y in zip(values, values[1:], own, own[1:]) if y <= x]
    if not falls_common:
        assert f"On the seeds every value holds ({seed_words(common)})** the mean CS rises at every step" in text
    for a, b in falls_common + falls_own:
        assert f"from {a:.2f} to {b:.2f}" in text
    for v, x in zip(values, own):
        assert f"| {v:.2f} | {', '.join(map(str, sorted(cs[v])))} |" in block(fidelity, "t-ra")
        # the mean over a value's own seeds says where they are not the common ones
        unlike = f" (unlike seeds: {v_span(cs[v])} against {v_span(common)})" if set(cs[v]) != set(common) else ""
        assert f"{x:.4f}{unlike} |" in block(fidelity, "t-ra"), (v, unlike)
    for s in common:
        drops = [f"from {a:.2f} to {b:.2f}" for a, b in zip(values, values[1:]) if cs[b][s] <= cs[a][s]]
        part = re.search(rf"seed {s} (.*?)(?:;|\. )", text.split("**Seed by seed**")[1]).group(1)
        assert (part == "rises at every step") if not drops else (part == "falls " + ", ".join(drops)), part
    best = values[int(np.argmax(on_common))]
    assert f"the best is T_Ra = {best:.2f}" in text
    # the estimators that do not read T_Ra are the same at every value, round by round
    for s in common:
        for col in ("cs_pooled", "cs_released", "cs_nnls"):
            cols = [(jobs["monitor", "default", "ce", s] if v == 1.25 else jobs["t_ra", f"t{v:g}", "ce", s])[col].to_numpy() for v in values]
            assert all(np.array_equal(c, cols[0], equal_nan=True) for c in cols)
    assert "is the same at every value, in every round" in text


def test_ratio_stability_sentences(jobs) -> None:
    """docs/ratio-stability.md: its trained tables recomputed from seeds 0–2 of the jobs, the max π range of the paper
    and released readings, the round-3 ramp-up of the stabilised readings, their spikes (π above 5× the median of the
    earlier rounds, from round 3 on), and the replay table's range of the paper reading's max π."""
    text = STABILITY.read_text()
    ftext = flat(text)
    table = [x for x in text.splitlines() if re.match(r"\| (10|50|100) \| \w+ \| 0, 1, 2 \|", x)]
    assert len(table) >= 19
    maxpi = {}
    for row in table:
        cells = [c.strip() for c in row.strip("|").split("|")]
        gamma, loss = cells[0], cells[1]
        exp = "ratio_stability" if loss in ("ratio_median", "ratio_sums") else "losses"
        rs = [jobs[exp, f"g{gamma}", loss, s] for s in (0, 1, 2)]
        def pm(values: list[float], digits: int) -> str:
            return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"
        assert cells[3] == pm([100 * r.acc_minority.iloc[-1] for r in rs], 2), row
        assert cells[4] == pm([100 * r.acc_minority.tail(5).mean() for r in rs], 2), row
        assert cells[5] == pm([100 * r.acc_majority.iloc[-1] for r in rs], 2), row
        assert cells[6] == pm([r.auc_hard.iloc[-1] for r in rs], 4), row
        if loss != "ce":
            trained = [[json.loads(w) for w in r.weights.iloc[:-1]] for r in rs]  # round t trains with row t - 1's π
            maxpi[gamma, loss] = max(max(p) for t in trained for p in t)
            assert cells[7] == f"{maxpi[gamma, loss]:.1f}", row
    first = [v for (g, loss), v in maxpi.items() if g in ("10", "50") and loss in ("ratio", "ratio_rel")]
    assert f"(max π {min(first):.0f}–{max(first):.0f})" in ftext
    assert "(max π 52–152)" not in ftext
    # the stabilised readings: round 1's π, round 3's largest π (a minority class's), later rounds, spikes
    minority = {2, 4, 7}
    r1, r3, later, above, n = [], {}, [], 0, 0
    for (exp, setting, loss, seed), r in jobs.items():
        if exp != "ratio_stability":
            continue
        pis = [[1.0] * 10] + [json.loads(w) for w in r.weights.iloc[:-1]]  # π of rounds 0, 1, ...
        r1 += pis[1]
        assert max(range(10), key=lambda p: pis[3][p]) in minority
        r3.setdefault(setting, []).append(max(pis[3]))
        later.append(max(max(p) for p in pis[4:]))
        above += max(max(p) for p in pis[4:]) > max(pis[3])
        n += 1
        for t in range(3, len(pis)):
            for p in range(10):
                if pis[t][p] > 5 * statistics.median(x[p] for x in pis[:t]):
                    assert t == 3, (setting, loss, seed, t, p)
    assert f"{min(r1):.2f}–{max(r1):.2f} in round 1 of the twelve runs" in ftext and n == 12
    for setting, g in r3.items():
        assert f"{min(g):.1f}–{max(g):.1f} at Γ = {setting[1:]}" in ftext
    assert f"in rounds 4–29 the largest π is {min(later):.1f}–{max(later):.1f}, above round 3's in {above} of the 12 runs" in ftext
    assert "π stays at that level afterwards" not in ftext and "rises to 10–15" not in ftext
    # the replay table: the paper reading's max π over the four trajectories
    replay = [x for x in text.splitlines() if re.match(r"\| Γ = \d+, `ratio(_rel)?` ", x)]
    paper = {x.split("|")[1].strip(): float(x.split("|")[2].split(",")[0]) for x in replay}
    assert len(paper) == 4
    others = [v for k, v in paper.items() if k != "Γ = 10, `ratio_rel` (released, *trained*)"]
    assert f"the paper's mean reaches {min(paper.values()):.0f}–{max(paper.values()):.0f}" in ftext
    assert f"{min(others):.0f}–{max(others):.0f} on the other three" in ftext


def _paired(a: list[float], b: list[float], digits: int) -> str:
    """mean(a - b) and its 95 % Student-t interval on 3 seeds, by hand (t quantile 4.3027 for 2 degrees of freedom),
    as the page writes them (signed, a true minus sign)."""
    d = [x - y for x, y in zip(a, b)]
    half = 4.302652729911275 * statistics.stdev(d) / len(d) ** 0.5
    m = statistics.mean(d)
    return (f"{m:+.{digits}f}", f"[{m - half:+.{digits}f}, {m + half:+.{digits}f}]".replace("-", "−"))


def test_ratio_stability_paired_differences(jobs) -> None:
    """docs/ratio-stability.md's differences of `ratio_median` against CE, the paper reading and `ratio_sums`, paired
    on seeds 0-2 with their 95 % intervals, recomputed by hand; the old 'inside both spreads' is gone."""
    ftext = flat(STABILITY.read_text())
    assert "inside both spreads" not in ftext and "a gap inside the paper reading's std" not in ftext

    def final(exp: str, g: int, loss: str) -> list[float]:
        return [100 * jobs[exp, f"g{g}", loss, s].acc_minority.iloc[-1] for s in (0, 1, 2)]

    for g in (10, 50, 100):
        med = final("ratio_stability", g, "ratio_median")
        gain, ci = _paired(med, final("losses", g, "ce"), 1)
        assert f"{gain} {'points of Ac.M ' if g == 10 else ''}at Γ = {g} {ci}" in ftext, (g, gain, ci)
        diff, ci = _paired(med, final("losses", g, "ratio"), 2)
        assert f"Γ = {g}: " in ftext and f": {diff.replace('-', '−')} {ci}" in ftext, (g, diff, ci)
    diff, ci = _paired(final("ratio_stability", 50, "ratio_sums"), final("ratio_stability", 50, "ratio_median"), 2)
    assert f"`ratio_sums` − `ratio_median` {diff} {ci}" in ftext
    _, ci50 = _paired(final("ratio_stability", 50, "ratio_median"), final("losses", 50, "ratio"), 2)
    holds_zero = ci50.startswith("[−") and not ci50.split(", ")[1].startswith("−")
    assert ("the seeds cannot tell the two apart at 95 %" in ftext) == holds_zero
