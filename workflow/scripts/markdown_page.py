"""Rule markdown_page: a Markdown summary (claims.md, Fidelity.md, Reproduction.md) -> the same as an HTML page for
the report (fedbalance.presentation.html.markdown_page)."""

from pathlib import Path

import _common

from fedbalance.presentation.html import markdown_page

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    Path(smk.output[0]).write_text(markdown_page(Path(smk.input.markdown).read_text(), smk.wildcards.page))
    print(smk.output[0])
