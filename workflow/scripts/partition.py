"""Rule partition: build the client partitions of one (experiment, dataset, setting, seed)."""

import _common

from fedbalance.data import load_dataset
from fedbalance.jobs import build_partitions, save_partitions

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    spec = smk.params.spec
    dataset = load_dataset(spec["source"], smk.params.data_dir, **spec.get("options", {}))
    partitions = build_partitions(spec, dataset)
    save_partitions(partitions, smk.output.partition)
    print(f"{smk.output.partition}: {', '.join(partitions)}")
