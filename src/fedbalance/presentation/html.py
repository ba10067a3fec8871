"""HTML pages of the report (``snakemake --report`` shows HTML inline): a page around a body, a Markdown file as a
page (Python-Markdown with its ``tables`` extension), a frame as a table (pandas ``to_html``)."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 14px; margin: 1.2em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.4em; }
table { border-collapse: collapse; margin: 0.6em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } table.dataframe td { text-align: right; white-space: nowrap; }
table.dataframe thead th { text-align: center; } tbody th { background: #fafafa; }
p.note { color: #555; }
"""


def page(title: str, body: str) -> str:
    """A whole HTML document: ``title`` (text) as its title and heading, ``body`` (HTML) below."""
    t = html.escape(title)
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{t}</title>\n"
            f"<style>{STYLE}</style>\n</head>\n<body>\n<h1>{t}</h1>\n{body}\n</body>\n</html>\n")


def markdown_page(text: str, title: str) -> str:
    """A Markdown document (claims.md, Fidelity.md, Reproduction.md) as an HTML page, its tables as tables."""
    import markdown

    return page(title, markdown.markdown(text, extensions=["tables"], output_format="html"))


def frame_html(frame: pd.DataFrame, **kwargs) -> str:
    """A frame as an HTML table (pandas ``to_html``; cells are escaped unless ``escape=False``)."""
    return frame.to_html(border=0, na_rep="–", **kwargs)
