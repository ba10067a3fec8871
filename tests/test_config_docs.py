"""config/README.md describes every key of the configuration schema."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _keys(schema: dict) -> set[str]:
    """Every property name of the schema, at any depth (top level, job, partition, monitor, ...)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                found.add(name)
                walk(sub)
            for k, v in node.items():
                if k != "properties":
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return found


def test_every_schema_key_is_documented():
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    doc = (REPO / "config" / "README.md").read_text()
    keys = _keys(schema)
    assert {"threads", "aux_source", "aux_selection", "g", "weighting", "save_trajectory", "loss_variants"} <= keys
    missing = sorted(k for k in keys if f"`{k}`" not in doc and f".{k}`" not in doc)
    assert not missing, f"config/README.md does not describe: {missing}"
