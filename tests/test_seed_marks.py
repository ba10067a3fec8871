"""No comparison of unlike seed sets on the page: every rendered document's seed marks (``seedstats.seed_mark``) name
like seeds on each side or are followed by the visible "unlike seeds", and the rows and sentences that compare carry
them (docs/design.md, "Like seeds on the page")."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from fedbalance.evidence.seedstats import UNLIKE, seed_mark, seed_marks, seed_span

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
SOURCE = "fedbalance reference docs"
RENDERED_PAGES = ("claims-mnist.md", "fidelity.md", "ratio-stability.md", "monitor.md")
"""The pages of docs/ that hold blocks rendered from the reference set."""


def block(page: str, name: str) -> str:
    m = re.search(rf"<!-- {re.escape(name)}: {re.escape(SOURCE)} -->\n(.*?)<!-- /{re.escape(name)} -->",
                  (DOCS / page).read_text(), re.S)
    assert m, f"docs/{page} has no block {name}"
    return m.group(1)


def unflagged(text: str) -> list[str]:
    """The marks of ``text`` whose sides name unlike seeds without the visible note right after them."""
    return [f"{m.group}: {[sorted(s) for s in m.sides]}" for m in seed_marks(text) if not m.like and not m.says_unlike]


def table_rows(text: str) -> list[str]:
    """The body rows of every Markdown table in ``text``."""
    rows, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i > 0 and lines[i - 1].startswith("|") and not set(line) <= set("|-: "):
            if not set(lines[i - 1]) <= set("|-: ") or (i > 1 and lines[i - 2].startswith("|")):
                rows.append(line)
    return [r for r in rows if not set(r) <= set("|-: ")]


def test_a_mark_by_hand() -> None:
    """Like sides: the mark alone; unlike ones: the mark and the visible note naming each set once."""
    assert seed_mark("Γ = 20", [2, 0, 1], (0, 1, 2)) == "<!-- seeds Γ = 20: 0,1,2 / 0,1,2 -->"
    unlike = seed_mark("a: b | c", [0, 1, 2, 3], [0, 1, 2], [0, 1, 2, 3])
    assert unlike == "<!-- seeds a  b   c: 0,1,2,3 / 0,1,2 / 0,1,2,3 --> (unlike seeds: 0–3 against 0–2)"
    assert seed_span([4, 0, 2]) == "0, 2, 4" and seed_span(range(5)) == "0–4" and seed_span([]) == "–"
    marks = seed_marks(f"x {unlike} y | z{seed_mark('g', [1], [1])} |")  # two on one line
    assert [(m.group, m.like, m.says_unlike) for m in marks] == [("a  b   c", False, True), ("g", True, False)]
    assert marks[0].sides == (frozenset({0, 1, 2, 3}), frozenset({0, 1, 2}), frozenset({0, 1, 2, 3}))


def test_the_check_finds_an_unlike_comparison_that_does_not_say_so() -> None:
    """What this module's checks fail on: a mark of unlike sides without the note (a hand-made one, as a renderer
    that set a 4-seed cell beside 3-seed ones without saying so would write)."""
    good = f"| Ratio | 3{seed_mark('g20', [0, 1, 2], [0, 1, 2])} |\n| CE | 5{seed_mark('g20', [0, 1, 2, 3, 4], [0, 1, 2])} |"
    assert unflagged(good) == []
    bad = "| Ratio | 4<!-- seeds g20: 0,1,2,3 / 0,1,2 --> |"
    assert unflagged(bad) == ["g20: [[0, 1, 2, 3], [0, 1, 2]]"]
    assert unflagged(bad.replace(" |", f" ({UNLIKE}: 0–3 against 0–2) |")) == []


@pytest.mark.parametrize("page", RENDERED_PAGES)
def test_no_rendered_page_compares_unlike_seeds_unsaid(page: str) -> None:
    """Every mark of every page with rendered blocks names like seeds on each side or says it does not."""
    text = (DOCS / page).read_text()
    assert unflagged(text) == [], page


def test_every_fidelity_row_is_read_on_the_seeds_its_gamma_shares() -> None:
    """docs/fidelity.md's Fidelity table: each row carries one mark, and every row of a (dataset, Γ) names the same
    seeds, which its seeds column lists; each reading of the Ratio Loss is named."""
    rows = [r for r in table_rows(block("fidelity.md", "fidelity")) if not r.startswith("| dataset |")]
    assert len(rows) >= 20
    seen: dict[tuple[str, str], set[frozenset[int]]] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        marks = seed_marks(row)
        assert len(marks) == 1 and marks[0].like, row
        seeds = marks[0].sides[0]
        assert cells[3].startswith(f"{len(seeds)} ({seed_span(seeds)}"), row
        seen.setdefault((cells[0], cells[1]), set()).add(seeds)
        if cells[2].startswith("ratio"):
            assert cells[2] in ("ratio (paper reading)", "ratio_rel (released reading)"), row
    assert all(len(s) == 1 for s in seen.values()), seen


def test_every_claim_that_compares_says_on_which_seeds() -> None:
    """docs/claims-mnist.md: every claim row whose evidence prints a comparison ("(3 seeds") carries a mark for
    each, and paired comparisons are on like seeds; the rule-change block the same."""
    for name in ("claims", "rule-change"):
        rows = [r for r in table_rows(block("claims-mnist.md", name)) if re.match(r"\| \d+r? \|", r)]
        assert len(rows) >= 31, name
        for row in rows:
            shown = len(re.findall(r"\(\d+ seeds?[,)]", row))
            assert len([m for m in seed_marks(row) if m.group.count(" - ") or m.group.count(" / ")]) >= shown, row
            assert all(m.like for m in seed_marks(row)), row


@pytest.mark.parametrize("name, rows", [("mismatch", 16), ("mfe", 8), ("early", 3), ("t-ra", 11)])
def test_every_prose_table_row_carries_its_seeds(name: str, rows: int) -> None:
    """The prose blocks' tables of several cells side by side: one mark a row (two in the T_Ra table: the mean over
    the common seeds and over each value's own, the second saying where they are unlike)."""
    body = [r for r in table_rows(block("fidelity.md", name)) if not re.match(r"\| (classes|acknowledged|T_Ra) ", r)]
    assert len(body) == rows
    for row in body:
        assert len(seed_marks(row)) == (2 if name == "t-ra" else 1), row


def test_the_seeds_block_marks_each_gamma_and_the_majority_claim() -> None:
    """docs/fidelity.md's "What the seeds say": each Γ bullet, the majority bullet and the monitor's carry marks."""
    text = block("fidelity.md", "seeds")
    bullets = [b for b in text.split("\n- ") if b.startswith("**")]
    for head in ("**Γ = 1,", "**Γ = 10.**", "**Γ = 20.**", "**Γ = 50.**", "**Γ = 100.**", "**Majority classes.**",
                 "**Monitor**"):
        bullet = next(b for b in bullets if b.startswith(head))
        assert seed_marks(bullet), head


def test_a_fidelity_table_of_unlike_cells_reads_them_on_like_seeds() -> None:
    """Rendered from frames where the Ratio Loss holds a fourth seed that CE lacks: both rows are read on seeds 0-2,
    the Ratio row says it holds one more, and every mark is like (the published cell of each row as before)."""
    from fedbalance.presentation.fidelity import fidelity_frame, fidelity_markdown

    finals, rounds = [], []
    for loss, seeds in (("ce", (0, 1, 2)), ("ratio", (0, 1, 2, 3))):
        for seed in seeds:
            acm = 0.80 + 0.01 * seed + (0.05 if loss == "ratio" else 0.0) - (0.5 if seed == 3 else 0.0)
            key = {"experiment": "losses", "dataset": "mnist", "setting": "g20", "loss": loss, "seed": seed}
            finals.append({**key, "acc_minority": acm, "auc_hard": 0.9, "auc_micro": 0.99, "wall_time_s": 60.0})
            rounds.append({**key, "round": 0, "acc_minority": acm, "auc_hard": 0.9})
    frame = fidelity_frame(pd.DataFrame(finals), pd.DataFrame(rounds)).set_index("loss")
    # seed 3 (Ratio alone) is not read: Ratio's mean is over 85, 86, 87
    assert frame.loc["ratio", "seeds"] == 3 and frame.loc["ratio", "held"] == 4
    assert frame.loc["ratio", "acm_final"] == pytest.approx(86.0) and frame.loc["ratio", "seed_ids"] == "0,1,2"
    md = fidelity_markdown(frame.reset_index())
    assert "| ratio (paper reading) | 3 (0–2; 1 more held, not read: not every loss of this Γ holds it)" in md
    assert unflagged(md) == [] and len(seed_marks(md)) == 2 and all(m.like for m in seed_marks(md))
