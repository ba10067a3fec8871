"""Rule partition: build the client partitions of one (experiment, dataset, setting, seed)."""

import _common
import numpy as np

from fedbalance.config import partition_args
from fedbalance.partition import job_partitions, save_partitions

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    spec = smk.params.spec
    data = np.load(smk.input.labels)
    scheme, kwargs = partition_args(spec)
    partitions = job_partitions(
        scheme, kwargs, data["labels"], data["writers"] if "writers" in data else None,
        num_classes=int(data["num_classes"]), seed=int(spec["seed"]), balanced=spec.get("switch_round") is not None,
    )
    save_partitions(partitions, smk.output.partition)
    print(f"{smk.output.partition}: {', '.join(partitions)}")
