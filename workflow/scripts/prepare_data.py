"""Rule prepare_data: fetch/verify one dataset's files; write its manifest (path, size, md5) and training labels."""

import _common
import numpy as np

from fedbalance.atomic import atomic_write, write_json
from fedbalance.data.datasets import data_manifest, load_dataset, prepare_dataset

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    p = smk.params
    files = prepare_dataset(p.source, p.data_dir, download=p.download, **p.options)
    manifest = data_manifest(smk.wildcards.dataset, p.source, p.options, p.data_dir, files)
    for f in manifest["files"]:
        print(f"{f['path']}  {f['size']} bytes  md5 {f['md5']}")
    ds = load_dataset(p.source, p.data_dir, **p.options)
    arrays = {"labels": ds.y_train.numpy(), "num_classes": np.int64(ds.num_classes)}
    if ds.writers_train is not None:
        arrays["writers"] = ds.writers_train.numpy()
    atomic_write(smk.output.labels, lambda fh: np.savez(fh, **arrays), mode="wb")
    write_json(manifest, smk.output.manifest)
