"""Partitioners: seeded ways to split a centralised dataset among clients, each giving a Partition.

Every partitioner takes its randomness from a ``numpy.random.Generator`` and gives every row to
at most one client. Label-aware partitioners draw rows *without replacement* from per-label
pools; each pool is shuffled once, so taking ``k`` rows of a label is a uniform draw of ``k``
of the rows still free.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Interval, check_param, invalid
from fedsample.data._checks import as_labels, check_int, infer_num_classes
from fedsample.data.partition import Partition, label_histogram
from fedsample.data.sizes import largest_remainder
from fedsample.errors import FedsampleError
from fedsample.federation import as_sizes
from fedsample.rng import check_generator

__all__ = [
    "partition_by_sizes",
    "partition_dirichlet",
    "partition_iid",
    "partition_one_label_per_client",
    "partition_test_like",
    "partition_test_split",
]


def partition_by_sizes(
    labels_or_count: int | npt.ArrayLike, sizes: npt.ArrayLike, *, rng: np.random.Generator
) -> Partition:
    """Give client ``i`` a uniformly random set of ``sizes[i]`` rows, disjoint across clients (i.i.d. split).

    ``labels_or_count`` is the number of rows, or any per-row array (labels) whose length is used.
    ``sizes`` are non-negative and sum to at most that number; unused rows are left out.

    >>> part = partition_by_sizes(10, [3, 1, 5], rng=np.random.default_rng(0))
    >>> part.sizes().tolist(), part.is_disjoint()
    ([3, 1, 5], True)
    """
    owner = "partition_by_sizes"
    num_samples = _count(labels_or_count, owner)
    counts = _as_counts(sizes, "sizes", owner)
    total = int(counts.sum())
    if total > num_samples:
        raise invalid("sizes", owner, f"summing to at most the number of rows ({num_samples})", f"a sum of {total}")
    rows = check_generator(rng, owner).permutation(num_samples)[:total]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return Partition(indptr=indptr, indices=rows, num_samples=num_samples, name="by-sizes")


def partition_iid(num_samples: int, *, num_clients: int, rng: np.random.Generator) -> Partition:
    """Shuffle ``num_samples`` rows and cut them into ``num_clients`` parts whose sizes differ by at most one.

    >>> partition_iid(10, num_clients=3, rng=np.random.default_rng(0)).sizes().tolist()
    [4, 3, 3]
    """
    owner = "partition_iid"
    count = check_int("num_samples", owner, num_samples, 1)
    n = check_int("num_clients", owner, num_clients, 1, count)
    sizes = np.full(n, count // n, dtype=np.int64)
    sizes[: count % n] += 1
    part = partition_by_sizes(count, sizes, rng=check_generator(rng, owner))
    return Partition(indptr=part.indptr, indices=part.indices, num_samples=count, name="iid")


def partition_one_label_per_client(
    labels: npt.ArrayLike,
    *,
    num_clients: int = 100,
    samples_per_client: int | None = None,
    num_classes: int | None = None,
    rng: np.random.Generator,
) -> Partition:
    """Every client holds rows of one label only, all clients the same number (paper 000, Sec. 6, MNIST).

    Clients are split among the ``C`` labels in contiguous groups whose sizes differ by at most
    one: client ``i`` holds label ``floor(i * C / n)``, so with 100 clients and 10 digits clients
    0-9 hold digit 0, clients 10-19 digit 1, and so on. The label of each client depends only on
    ``(n, C)``, so calling this on the test labels gives the matching test split.

    Parameters
    ----------
    labels:
        Class label of every row.
    num_clients:
        ``n``; 100 in paper 000.
    samples_per_client:
        Rows per client (500 for training and 100 for testing in paper 000). Defaults to the
        largest equal size the label pools allow.
    num_classes:
        ``C``; defaults to ``max(labels) + 1``.
    rng:
        Source of the draw without replacement within each label.

    >>> labels = np.repeat(np.arange(3), 5)
    >>> part = partition_one_label_per_client(labels, num_clients=6, rng=np.random.default_rng(0))
    >>> part.sizes().tolist(), labels[part.client(5)].tolist()
    ([2, 2, 2, 2, 2, 2], [2, 2])
    """
    owner = "partition_one_label_per_client"
    y = as_labels(labels, owner)
    classes = infer_num_classes(y, num_classes, owner)
    n = check_int("num_clients", owner, num_clients, 1)
    rng = check_generator(rng, owner)
    client_label = np.arange(n, dtype=np.int64) * classes // n
    group = np.bincount(client_label, minlength=classes)
    pool = np.bincount(y, minlength=classes)
    used = group > 0
    largest = int((pool[used] // group[used]).min())
    if samples_per_client is None:
        if largest == 0:
            c = int(np.flatnonzero(used & (pool < group))[0])
            raise FedsampleError(
                f"partition_one_label_per_client cannot give {group[c]} clients one row each of label {c}: "
                f"the labels hold only {pool[c]} rows of it.",
                parameter="labels",
            )
        per_client = largest
    else:
        per_client = check_int("samples_per_client", owner, samples_per_client, 1)
        if per_client > largest:
            c = int(np.flatnonzero(used & (pool < group * per_client))[0])
            raise invalid(
                "samples_per_client",
                owner,
                f"at most {largest} (label {c} has {pool[c]} rows for {group[c]} clients)",
                samples_per_client,
            )
    order, starts = _shuffled_pools(y, classes, rng)
    # Client j of label c's group takes the j-th block of per_client rows of the shuffled pool.
    rank = np.arange(n, dtype=np.int64) - np.searchsorted(client_label, client_label)
    first = starts[client_label] + rank * per_client
    rows = order[(first[:, None] + np.arange(per_client)).ravel()]
    indptr = np.arange(n + 1, dtype=np.int64) * per_client
    return Partition(indptr=indptr, indices=rows, num_samples=y.size, name="one-label-per-client")


def partition_dirichlet(
    labels: npt.ArrayLike,
    *,
    alpha: float,
    sizes: npt.ArrayLike | None = None,
    num_clients: int | None = None,
    num_classes: int | None = None,
    rng: np.random.Generator,
) -> Partition:
    """Label mixtures drawn from ``Dirichlet(alpha)`` for clients of prescribed sizes (paper 000, Sec. 6, CIFAR-10).

    Client ``i`` draws label proportions ``q_i ~ Dir(alpha 1_C)`` (Hsu et al. 2019, used by 000),
    then ``n_i`` rows: label counts ``~ Multinomial(n_i, q_i)``, each count taken without
    replacement from that label's pool. Small ``alpha`` concentrates each client on few labels
    (``alpha = 0.001``: essentially one); large ``alpha`` approaches the global label mix.

    Pools running out (the papers are silent; documented choice): clients are served in a random
    order, and when a client asks for more rows of a label than remain, it takes what remains and
    redraws the shortfall from ``q_i`` renormalised over the labels that still have rows. When
    ``q_i`` puts no mass at all on those labels, the shortfall is drawn in proportion to the rows
    each label has left. Each client therefore gets exactly ``n_i`` rows as long as
    ``sum(sizes)`` does not exceed the number of rows.

    Parameters
    ----------
    labels:
        Class label of every row.
    alpha:
        Concentration of the Dirichlet law, in ``(0, inf)``; 000 uses 0.001, 0.01, 0.1 and 10.
    sizes:
        ``n_i`` per client, e.g. ``fedsample.federation.builtin_sizes("unbalanced")``.
    num_clients:
        Instead of ``sizes``: ``n`` clients of ``len(labels) // n`` rows each, the sizes that
        ``FederationSpec(partition="dirichlet", num_clients=n)`` gives. Exactly one of the two is given.
    num_classes:
        ``C``; defaults to ``max(labels) + 1``.
    rng:
        Source of the proportions, the counts, the serving order and the rows.

    >>> labels = np.repeat(np.arange(4), 100)
    >>> part = partition_dirichlet(labels, alpha=0.001, sizes=[20, 30, 40], rng=np.random.default_rng(1))
    >>> part.sizes().tolist(), [len(set(labels[part.client(i)].tolist())) for i in range(3)]
    ([20, 30, 40], [1, 1, 1])
    >>> partition_dirichlet(labels, alpha=0.1, num_clients=3, rng=np.random.default_rng(1)).sizes().tolist()
    [133, 133, 133]
    """
    owner = "partition_dirichlet"
    y = as_labels(labels, owner)
    check_param("alpha", owner, alpha, Interval(float, 0, math.inf, closed="neither"))
    if sizes is not None and num_clients is not None:
        raise invalid("num_clients", owner, "None when sizes is given (one or the other)", num_clients)
    if sizes is not None:
        counts = as_sizes(sizes, owner=owner)
    elif num_clients is not None:
        n = check_int("num_clients", owner, num_clients, 1, max(1, y.size))
        counts = as_sizes(np.full(n, y.size // n, dtype=np.int64), owner=owner)
    else:
        raise invalid("sizes", owner, "given when num_clients (equal sizes) is not", None)
    classes = infer_num_classes(y, num_classes, owner)
    rng = check_generator(rng, owner)
    if int(counts.sum()) > y.size:
        raise invalid("sizes", owner, f"summing to at most the number of rows ({y.size})", f"a sum of {counts.sum()}")
    # 000, Sec. 6: one label mixture q_i ~ Dir(alpha 1_C) per client, then n_i rows drawn from it.
    proportions = _dirichlet_rows(float(alpha), counts.size, classes, rng)
    parts = _fill_from_pools(y, classes, proportions, counts, rng, requests=None)
    return Partition.from_lists(parts, num_samples=y.size, name=f"dirichlet(alpha={float(alpha):g})")


def _test_inputs(
    partition: Partition,
    train_labels: npt.ArrayLike,
    test_labels: npt.ArrayLike,
    num_classes: int | None,
    owner: str,
) -> tuple[IntArray, int, IntArray]:
    """The checked test labels, the number of classes, and each client's training label counts."""
    if not isinstance(partition, Partition):
        raise invalid("partition", owner, "a Partition", partition)
    y_train = as_labels(train_labels, owner, name="train_labels")
    y_test = as_labels(test_labels, owner, name="test_labels")
    if y_train.size != partition.num_samples:
        raise invalid("train_labels", owner, f"of length num_samples = {partition.num_samples}", y_train.size)
    largest = max(int(y_train.max()) if y_train.size else 0, int(y_test.max()) if y_test.size else 0)
    classes = infer_num_classes(np.array([largest], dtype=np.int64), num_classes, owner)
    train_counts = label_histogram(
        partition.client_of_rows(), y_train[partition.indices], partition.num_clients, classes
    )
    return y_test, classes, train_counts


def partition_test_like(
    partition: Partition,
    train_labels: npt.ArrayLike,
    test_labels: npt.ArrayLike,
    *,
    fraction: float = 0.2,
    num_classes: int | None = None,
    rng: np.random.Generator,
) -> Partition:
    """A test split with ``fraction`` of each client's training size and its label proportions.

    Paper 000 gives each CIFAR-10 client test rows "amounting to a fifth of" its training size
    (``fraction = 0.2``). Client ``i`` gets ``round(fraction * n_i)`` test rows whose label counts
    are its realised training label counts scaled by ``fraction`` and rounded to integers that
    keep the total (largest remainder). Rows come from the test pools without replacement; a
    shortfall is handled as in :func:`partition_dirichlet`, renormalising the client's training
    proportions over the labels that still have test rows. Clients may get zero test rows.

    >>> train = np.repeat(np.arange(2), 20)
    >>> part = Partition.from_lists([np.arange(10), np.arange(20, 40)], num_samples=40)
    >>> test = partition_test_like(part, train, np.repeat(np.arange(2), 10), rng=np.random.default_rng(0))
    >>> test.sizes().tolist()
    [2, 4]
    """
    owner = "partition_test_like"
    check_param("fraction", owner, fraction, Interval(float, 0, None, closed="neither"))
    y_test, classes, train_counts = _test_inputs(partition, train_labels, test_labels, num_classes, owner)
    rng = check_generator(rng, owner)
    totals = np.rint(float(fraction) * partition.sizes()).astype(np.int64)
    if int(totals.sum()) > y_test.size:
        raise invalid(
            "fraction",
            owner,
            f"small enough that the test rows ({y_test.size}) cover the {int(totals.sum())} requested",
            fraction,
        )
    requests = np.zeros_like(train_counts)
    for i in np.flatnonzero(totals > 0):
        requests[i] = largest_remainder(train_counts[i].astype(np.float64), int(totals[i]))
    proportions = train_counts / np.maximum(train_counts.sum(axis=1, keepdims=True), 1)
    parts = _fill_from_pools(y_test, classes, proportions, totals, rng, requests=requests)
    return Partition.from_lists(parts, num_samples=y_test.size, name=f"{partition.name}/test")


def partition_test_split(
    partition: Partition,
    train_labels: npt.ArrayLike,
    test_labels: npt.ArrayLike,
    *,
    num_classes: int | None = None,
    rng: np.random.Generator,
) -> Partition:
    """Every row of a data set's own test split, given to the clients with their training label proportions.

    The test rows of label ``c`` are shared among the clients in proportion to the number of
    training rows of ``c`` each holds (integers by largest remainder); the rows of a label that no
    client trains on are shared in proportion to the clients' training sizes. Which rows a client
    gets is a uniform random draw. Pooled, the clients' test rows are the whole split, so the
    pooled test accuracy is the usual accuracy on that split.

    >>> train = np.repeat(np.arange(2), 20)
    >>> part = Partition.from_lists([np.arange(10), np.arange(20, 40)], num_samples=40)
    >>> test = partition_test_split(part, train, np.repeat(np.arange(2), 7), rng=np.random.default_rng(0))
    >>> test.sizes().tolist()
    [7, 7]
    """
    owner = "partition_test_split"
    y_test, classes, train_counts = _test_inputs(partition, train_labels, test_labels, num_classes, owner)
    rng = check_generator(rng, owner)
    sizes = train_counts.sum(axis=1)
    fallback = (sizes if sizes.sum() > 0 else np.ones_like(sizes)).astype(np.float64)
    parts: list[list[IntArray]] = [[] for _ in range(partition.num_clients)]
    for label in range(classes):
        rows = rng.permutation(np.flatnonzero(y_test == label))
        if rows.size == 0:
            continue
        holders = train_counts[:, label]
        shares = holders.astype(np.float64) if holders.sum() > 0 else fallback
        bounds = np.concatenate(([0], np.cumsum(largest_remainder(shares, rows.size))))
        for client in np.flatnonzero(np.diff(bounds)):
            parts[client].append(rows[bounds[client] : bounds[client + 1]])
    lists = [np.sort(np.concatenate(p)) if p else np.zeros(0, dtype=np.int64) for p in parts]
    return Partition.from_lists(lists, num_samples=y_test.size, name=f"{partition.name}/test")


# --- shared machinery ------------------------------------------------------------------------


def _count(labels_or_count: int | npt.ArrayLike, owner: str) -> int:
    if isinstance(labels_or_count, (int, np.integer)) and not isinstance(labels_or_count, bool):
        return check_int("labels_or_count", owner, labels_or_count, 0)
    array = np.asarray(labels_or_count)
    if array.ndim != 1:
        raise invalid("labels_or_count", owner, "a number of rows or a 1-D per-row array", labels_or_count)
    return int(array.size)


def _as_counts(values: npt.ArrayLike, name: str, owner: str) -> IntArray:
    constraint = "a non-empty 1-D sequence of non-negative integers"
    raw = np.asarray(values)
    if raw.ndim != 1 or raw.size == 0 or raw.dtype == np.bool_ or raw.dtype.kind not in "iuf":
        raise invalid(name, owner, constraint, values)
    if raw.dtype.kind == "f" and (not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw))):
        raise invalid(name, owner, constraint, raw)
    counts = raw.astype(np.int64)
    if counts.min() < 0:
        raise invalid(name, owner, constraint, counts)
    return counts


def _shuffled_pools(labels: IntArray, num_classes: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
    """Row ids grouped by label (each group in random order) and the offset of each group."""
    shuffled = rng.permutation(labels.size)
    order = shuffled[np.argsort(labels[shuffled], kind="stable")]
    starts = np.concatenate([[0], np.cumsum(np.bincount(labels, minlength=num_classes))]).astype(np.int64)
    return order, starts


def _dirichlet_rows(alpha: float, num_rows: int, num_classes: int, rng: np.random.Generator) -> FloatArray:
    proportions = rng.dirichlet(np.full(num_classes, alpha), size=num_rows)
    # For tiny alpha every gamma variate can underflow; the alpha -> 0 limit is one random label.
    bad = ~np.all(np.isfinite(proportions), axis=1) | (proportions.sum(axis=1) <= 0)
    if bad.any():  # pragma: no cover - numpy >= 1.25 draws small alphas without underflow
        proportions[bad] = np.eye(num_classes)[rng.integers(num_classes, size=int(bad.sum()))]
    return np.asarray(proportions, dtype=np.float64)


def _fill_from_pools(
    labels: IntArray,
    num_classes: int,
    proportions: FloatArray,
    totals: IntArray,
    rng: np.random.Generator,
    *,
    requests: IntArray | None,
) -> list[IntArray]:
    """Draw each client's rows from the label pools; see :func:`partition_dirichlet` for exhaustion."""
    order, starts = _shuffled_pools(labels, num_classes, rng)
    remaining = np.diff(starts)
    # A random serving order, so that no client is systematically the one that finds pools empty.
    taken_before = np.zeros(num_classes, dtype=np.int64)
    parts: list[IntArray] = [np.zeros(0, dtype=np.int64)] * totals.size
    for i in rng.permutation(totals.size):
        q = proportions[i]
        want = rng.multinomial(int(totals[i]), q) if requests is None else requests[i]
        take = np.minimum(want, remaining)
        shortfall = int(totals[i] - take.sum())
        while shortfall > 0:
            free = remaining - take
            weights = np.where(free > 0, q, 0.0)
            if weights.sum() <= 0:
                weights = free.astype(np.float64)
            extra = np.minimum(rng.multinomial(shortfall, weights / weights.sum()), free)
            take += extra
            shortfall -= int(extra.sum())
        first = starts[:-1] + taken_before
        rows = np.concatenate([order[first[c] : first[c] + take[c]] for c in np.flatnonzero(take)] or [order[:0]])
        # Mix the labels within a client so that its rows are not grouped by class.
        parts[i] = rows[rng.permutation(rows.size)]
        taken_before += take
        remaining -= take
    return parts
