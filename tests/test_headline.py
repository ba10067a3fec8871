"""The README's first screen is what the reference set says: the claims' verdicts counted as docs/claims-mnist.md lists
them, and the two figures' plotted numbers (docs/figures/*.csv) recomputed from the set's job folders."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from fedbalance.jobs.aggregate import collect
from fedbalance.presentation.figures import HEADLINE, maker
from fedbalance.presentation.headline import SAYS, install_figures, tally

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "reference" / "mnist"
README = REPO / "README.md"
FIGURES = REPO / "docs" / "figures"
SOURCE = "fedbalance reference docs"


def block(text: str, name: str) -> str:
    m = re.search(rf"<!-- {name}: {re.escape(SOURCE)} -->\n(.*?)<!-- /{name} -->", text, re.S)
    assert m, f"no block {name}"
    return m.group(1)


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return collect(REFERENCE)


def test_the_first_screen_shows_the_findings_before_the_quick_start() -> None:
    text = README.read_text()
    first = text[:text.index("## Quick start")]
    assert first.index("## What the reproduction found") < first.index("docs/figures/Losses_acm_gamma.png")
    assert "docs/figures/Headline_monitor.png" in first and "<!-- findings:" in first
    assert len(first.splitlines()) <= 40  # one screen: the title, what it is, the tally, the two figures, their key


def test_the_readme_tally_counts_the_verdicts_of_docs_claims() -> None:
    """The tally in the README is the verdict column of docs/claims-mnist.md's claims block, counted here by reading the
    table (the README's block is computed from the render's claims, ``headline.tally_text``): the paper's claims
    counted, those that hold and those that do not named, and the project's own checks (their sentence in the
    block's sentence table says "not a claim of the paper") in a sentence of their own, not counted."""
    claims = block((REPO / "docs" / "claims-mnist.md").read_text(), "claims")
    own = set(re.findall(r'^\| (\d+) \| \w[^|]* \| "\(not a claim of the paper', claims, re.M))
    rows = re.findall(r"^\| (\d+)([rp]?) \| (.*?) \| .*? \| \*\*(.+?)\*\* \| .* \|$", claims, re.M)
    paper = [r for r in rows if r[0] not in own]
    verdicts = [v for _, _, _, v in paper]
    numbers = {n for n, _, _, _ in paper}
    both = [n for n, r, _, _ in paper if r == "r"]
    second = [n for n, r, _, _ in paper if r == "p"]
    assert own == {"18"} and len(numbers) == 30 and len(paper) == 30 + len(both) + len(second)
    findings = " ".join(block(README.read_text(), "findings").split())
    assert f"Of the paper's {len(numbers)} headline claims ({len(paper)} verdicts: claims " in findings
    assert f"{', '.join(both[:-1])} and {both[-1]} judged for both readings of the Ratio Loss" in findings
    for verdict, n in Counter(verdicts).items():
        assert f"**{n}** {SAYS[verdict]}" in findings, (verdict, n)
    for verdict, words in (("holds", "Hold: "), ("does not hold", "Do not hold: ")):
        named = [f"{n}{r} ({text})" for n, r, text, v in paper if v == verdict]
        if named:
            assert f"{words}{'; '.join(named)}." in findings
    for n, r, text, v in (r for r in rows if r[0] in own):
        assert f"claim {n}{r}, {text.rstrip('.')}: **{v}**" in findings
    held = len(list(REFERENCE.glob("*/*/*/*/seed*/provenance.json")))
    assert f"judged on the {held} jobs of reference/mnist" in findings


def test_the_readme_figures_plot_the_reference_set(frames) -> None:
    """Each figure's numbers (its CSV) are what the set gives now; the PNG records the SHA-256 of that CSV, is small,
    and is the one the README shows."""
    final, rounds = frames
    for name in HEADLINE:
        csv = FIGURES / f"{name}.csv"
        _, points = maker(name)(final, rounds, None)
        committed = pd.read_csv(csv, keep_default_na=False, na_values=[""])
        fresh = pd.read_csv(pd.io.common.StringIO(points.to_csv(index=False)), keep_default_na=False, na_values=[""])
        assert len(committed) > 10, name
        pd.testing.assert_frame_equal(committed, fresh, check_dtype=False, rtol=1e-5)
        png = FIGURES / f"{name}.png"
        assert Image.open(png).text["csv-sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest(), name
        assert png.stat().st_size < 150_000 and Image.open(png).size[0] <= 800, name
        assert f"docs/figures/{name}.png" in README.read_text()


def test_install_figures_copies_what_changed(tmp_path: Path) -> None:
    render = tmp_path / "render"
    render.mkdir()
    for name in HEADLINE:
        (render / f"{name}.csv").write_text(f"{name}\n1\n")
        (render / f"{name}.png").write_bytes(b"\x89PNG")
    docs = tmp_path / "docs"
    assert len(install_figures(render, docs, check=True)) == 2 * len(HEADLINE) and not docs.exists()
    assert len(install_figures(render, docs)) == 2 * len(HEADLINE)
    assert install_figures(render, docs) == [] and install_figures(render, docs, check=True) == []
    (render / f"{HEADLINE[0]}.csv").write_text("changed\n")
    assert [p.name for p in install_figures(render, docs)] == [f"{HEADLINE[0]}.csv", f"{HEADLINE[0]}.png"]
    (render / f"{HEADLINE[1]}.png").unlink()
    with pytest.raises(FileNotFoundError, match=HEADLINE[1]):
        install_figures(render, docs)


def test_tally_counts_every_verdict() -> None:
    assert tally(["holds", "holds", "too few seeds"]) == {"holds": 2, "does not hold": 0, "not distinguishable": 0,
                                                          "too few seeds": 1, "not enough data": 0}
    with pytest.raises(ValueError, match="unknown verdicts"):
        tally(["maybe"])
