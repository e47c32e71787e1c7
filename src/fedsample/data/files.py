"""A user's own data file as a federation: its own clients when it has the client column, else split.

:func:`read_data_file` reads the file a :class:`~fedsample.data.spec.FederationSpec` names
(:func:`~fedsample.data.loaders.read_table`). A file with the client column is naturally federated
(:func:`natural_federation`); one without it is a centralised data set
(:func:`centralised_data`), which :func:`~fedsample.data.builders.build_federation` splits among
clients like the built-in ones.
"""

from __future__ import annotations

import numpy as np

from fedsample._validation import Options, invalid
from fedsample.data.dataset import ArrayDataset
from fedsample.data.federated import FederatedDataset, federate
from fedsample.data.loaders.table import Table, read_table
from fedsample.data.partition import Partition
from fedsample.data.spec import FederationSpec

__all__ = ["centralised_data", "hold_out", "natural_federation", "read_data_file"]

_OWNER = "FederationSpec"
# Partitions that need no labels: the ones a regression data file can be split by.
_UNLABELLED = ("iid", "lognormal", "osmd-skewed")


def read_data_file(spec: FederationSpec) -> Table:
    """The data file ``spec.dataset``, read with the spec's columns, task and test file."""
    return read_table(
        spec.dataset,
        target_column=spec.target_column,
        client_column=spec.client_column,
        feature_columns=spec.feature_columns,
        task=spec.task,
        test_path=spec.test_path,
        owner=_OWNER,
        parameter="dataset",
    )


def natural_federation(
    spec: FederationSpec, table: Table, *, default_fraction: float, rng: np.random.Generator
) -> FederatedDataset:
    """The clients of a data file with the client column, with their test rows.

    The file's own test rows go to the clients they name. Without them each client keeps
    ``spec.test_fraction`` (``None``: ``default_fraction``) of its training size as test rows
    (:func:`hold_out`; 0: no test rows).
    """
    if spec.partition != "natural":
        constraint = f"'natural' for {spec.dataset!r}, whose column {spec.client_column!r} names each row's client"
        raise invalid("partition", _OWNER, constraint, spec.partition)
    data = table.dataset(table.train)
    partition = table.by_client(table.train)
    test: ArrayDataset | None = None
    test_partition: Partition | None = None
    if table.test is not None:
        if spec.test_fraction is not None:
            constraint = f"None for {spec.dataset!r}, whose clients come with their own test rows"
            raise invalid("test_fraction", _OWNER, constraint, spec.test_fraction)
        test, test_partition = table.dataset(table.test), table.by_client(table.test)
    else:
        fraction = default_fraction if spec.test_fraction is None else spec.test_fraction
        if fraction > 0:
            partition, test_partition = hold_out(partition, fraction, rng)
            test = data
    return federate(
        data, partition, test=test, test_partition=test_partition, name=table.name, client_names=table.client_names
    )


def hold_out(partition: Partition, fraction: float, rng: np.random.Generator) -> tuple[Partition, Partition]:
    """Each client's rows split into training and test rows over the same data set.

    Client ``i`` with ``n_i`` rows gets ``round(n_i f / (1 + f))`` test rows, so that its test rows are
    ``f`` times its training rows (the meaning of ``test_fraction`` everywhere), and keeps at least
    one training row. Which rows are test rows is a uniform draw; both parts keep the rows' order.

    >>> part = Partition.from_assignment(np.array([0, 0, 0, 0, 0, 0, 1, 1]))
    >>> train, test = hold_out(part, 0.5, np.random.default_rng(0))
    >>> train.sizes().tolist(), test.sizes().tolist()
    ([4, 1], [2, 1])
    """
    sizes = partition.sizes()
    wanted = np.rint(sizes * fraction / (1 + fraction)).astype(np.int64)
    counts = np.minimum(wanted, np.maximum(sizes - 1, 0))
    client = partition.client_of_rows()
    # Entries grouped by client, in random order within each client: the first counts[i] are its test rows.
    order = np.lexsort((rng.random(client.size), client))
    rank = np.arange(client.size) - partition.indptr[client[order]]
    test = np.zeros(client.size, dtype=bool)
    test[order[rank < counts[client[order]]]] = True
    parts = []
    for chosen in (~test, test):
        assignment = np.full(partition.num_samples, -1, dtype=np.int64)
        assignment[partition.indices[chosen]] = client[chosen]
        parts.append(Partition.from_assignment(assignment, num_clients=partition.num_clients, name=partition.name))
    return parts[0], parts[1]


def centralised_data(spec: FederationSpec, table: Table) -> tuple[ArrayDataset, ArrayDataset | None]:
    """A data file without the client column: its training rows and its own test rows (``None``
    when it has none), after checking that ``spec.partition`` can split it."""
    if spec.partition == "natural":
        constraint = (
            f"a partition other than 'natural' for {spec.dataset!r}, which has no client column {spec.client_column!r} "
            f"(its columns: {', '.join(table.columns)})"
        )
        raise invalid("partition", _OWNER, constraint, spec.partition)
    if table.task == "regression" and spec.partition not in _UNLABELLED:
        constraint = f"{Options(_UNLABELLED)} for the regression data file {spec.dataset!r} (the others split by label)"
        raise invalid("partition", _OWNER, constraint, spec.partition)
    return table.dataset(table.train), None if table.test is None else table.dataset(table.test)
