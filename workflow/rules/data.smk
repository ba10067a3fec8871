# Stage 1: make sure each dataset's files are present and verified (download where allowed),
# once per dataset, and record them in a manifest (path, size, md5). The embedded mnist5k has no
# files: its manifest lists none. The training labels (and writer ids) go to <dataset>.labels.npz
# so that the partition jobs need neither torch nor the images. Data files are not inputs (a download
# would change the input set); instead every train job checks them against the manifest
# (fedbalance.data.datasets.check_manifest) and fails, naming the file, when one changed since: rerun with
# `--forcerun prepare_data`. Runs on the submitting host (localrules): cluster compute nodes
# often have no internet; point `data_dir` at a pre-staged copy where even that host has none.


localrules:
    prepare_data,


rule prepare_data:
    output:
        manifest=result("data", "{dataset}.json"),
        labels=result("data", "{dataset}.labels.npz"),
    log:
        result("logs", "data", "{dataset}.log"),
    benchmark:
        result("benchmarks", "data", "{dataset}.tsv")
    conda:
        torch_env
    threads: 1
    resources:
        mem_mb=data_mem_mb,
        runtime=120,
    params:
        source=lambda wc: dataset_source(wc.dataset),
        options=lambda wc: dataset_data(wc.dataset)[1],
        plugin=lambda wc: plugin_param(dataset_plugin(config, wc.dataset), dataset_source(wc.dataset)),
        data_dir=DATA_DIR,
        download=config["download"],
    script:
        "../scripts/prepare_data.py"
