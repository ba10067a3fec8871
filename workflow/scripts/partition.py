"""Rule partition: build the client partitions of one (experiment, dataset, setting, seed)."""

import _common
import numpy as np

from fedbalance.data.partition import save_partitions, spec_partitions

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    spec = smk.params.spec
    data = np.load(smk.input.labels)
    writers = data["writers"] if "writers" in data else None
    partitions = spec_partitions(spec, data["labels"], writers, num_classes=int(data["num_classes"]))
    save_partitions(partitions, smk.output.partition)
    print(f"{smk.output.partition}: {', '.join(partitions)}")
