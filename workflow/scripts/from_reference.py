"""Rule from_reference: every job of a render written from the reference set (a twin from the job covering it)."""

import _common

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    from fedbalance.reuse import write_twin

    for source, target, spec in smk.params.copies:
        write_twin(source, target, spec)
    print(f"{len(smk.params.copies)} jobs written from {len({c[0] for c in smk.params.copies})} of the reference set")
