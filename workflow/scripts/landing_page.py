"""Rule landing_page: the study (config, datasets, where the numbers come from) and links to the summary pages -> the
report's landing page, reStructuredText; each family's protocol, what was not run and the plug-ins it uses -> the
study page, HTML (fedbalance.presentation.study.write_landing_page)."""

import _common

from fedbalance.presentation.study import write_landing_page
from fedbalance.common.records import Job

smk = snakemake  # noqa: F821  (injected by Snakemake)

with _common.logged(smk):
    p = smk.params
    jobs = [Job(*j) for j in p.jobs]
    print(write_landing_page(smk.output.landing, smk.output.study, smk.config, jobs, p.study, tables_not_run=p.tables_not_run,
                             figures_not_run=p.figures_not_run, plugins=p.plugins))
