"""Rule prepare_data: fetch/verify one dataset's files and write its manifest (path, size, md5)."""

from pathlib import Path

import _common

from fedbalance.data import prepare_dataset

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    p = smk.params
    files = prepare_dataset(p.source, p.data_dir, download=p.download, **p.options)
    manifest = {
        "dataset": smk.wildcards.dataset,
        "source": p.source,
        "options": dict(p.options),
        "data_dir": str(p.data_dir),
        "files": [
            {"path": str(f), "size": Path(f).stat().st_size, "md5": _common.md5sum(Path(f))} for f in sorted(map(str, files))
        ],
    }
    for f in manifest["files"]:
        print(f"{f['path']}  {f['size']} bytes  md5 {f['md5']}")
    _common.write_json_atomic(manifest, smk.output.manifest)
