"""Federations: datasets, partitioners that split them among clients, and loaders (numpy only).

The layer's pieces:

- :class:`ArrayDataset`, a centralised dataset; :class:`Partition`, which rows each client owns;
  :func:`federate` joins them into a :class:`FederatedDataset`, the engine's input, whose
  :meth:`~FederatedDataset.federation` is what samplers see.
- embedded data that need no network: :func:`load_digits` (scikit-learn's digits, ``data``
  extra), :func:`make_mnist1d`, :func:`make_osmd_linear_regression` (paper 001),
  :func:`make_quadratic_clients` (paper 003);
- partitioners (paper 000's one-label and Dirichlet splits, i.i.d. and size-driven splits) and
  size generators (paper 001's skewed sizes, paper 004's log-normal sizes);
- :mod:`fedsample.data.loaders` for files already on disk: IDX (MNIST family), CIFAR-10 binary,
  LEAF JSON, and tables with a client column.

>>> import numpy as np
>>> from fedsample import data
>>> rng = np.random.default_rng(0)
>>> signals = data.make_mnist1d(1000, rng=rng)
>>> part = data.partition_dirichlet(signals.targets, alpha=0.1, sizes=[100] * 5, rng=rng)
>>> fed = data.federate(signals, part)
>>> fed.num_clients, fed.train_sizes().tolist()
(5, [100, 100, 100, 100, 100])
"""

from fedsample.data._optional import MissingDependencyError
from fedsample.data.dataset import ArrayDataset, Task
from fedsample.data.digits import load_digits
from fedsample.data.federated import FederatedDataset, FederationSummary, federate
from fedsample.data.loaders import (
    IDX_KINDS,
    SHAKESPEARE_VOCABULARY,
    encode_characters,
    load_cifar10,
    load_idx_dataset,
    load_leaf,
    load_table,
    read_columns,
    read_idx,
)
from fedsample.data.mnist1d import TEMPLATES, make_mnist1d
from fedsample.data.partition import Partition, PartitionSummary, summarise
from fedsample.data.partitioners import (
    partition_by_sizes,
    partition_dirichlet,
    partition_iid,
    partition_one_label_per_client,
    partition_test_like,
    partition_test_split,
)
from fedsample.data.sizes import lognormal_sizes, osmd_skewed_sizes
from fedsample.data.synthetic import (
    QuadraticClients,
    heavy_first_importances,
    make_osmd_linear_regression,
    make_quadratic_clients,
)

__all__ = [
    "IDX_KINDS",
    "SHAKESPEARE_VOCABULARY",
    "TEMPLATES",
    "ArrayDataset",
    "FederatedDataset",
    "FederationSummary",
    "MissingDependencyError",
    "Partition",
    "PartitionSummary",
    "QuadraticClients",
    "Task",
    "encode_characters",
    "federate",
    "heavy_first_importances",
    "load_cifar10",
    "load_digits",
    "load_idx_dataset",
    "load_leaf",
    "load_table",
    "lognormal_sizes",
    "make_mnist1d",
    "make_osmd_linear_regression",
    "make_quadratic_clients",
    "osmd_skewed_sizes",
    "partition_by_sizes",
    "partition_dirichlet",
    "partition_iid",
    "partition_one_label_per_client",
    "partition_test_like",
    "partition_test_split",
    "read_columns",
    "read_idx",
    "summarise",
]
