"""The clustered-similarity distances have the same bits at any BLAS thread count (issue 12 item 8).

In-process companion of ``tests/experiments/test_thread_determinism.py``: BLAS's thread pool is
resized with threadpoolctl (a dependency of scikit-learn, so of the dev extras). At these sizes
OpenBLAS splits a matrix product over 2 threads, and the BLAS cross term changed the last bits of
some distances.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedsample.samplers.similarity.sampler import distance_rows, pairwise_distances, update_distances

threadpoolctl = pytest.importorskip("threadpoolctl")


@pytest.mark.parametrize("similarity", ["arccos", "l2"])
def test_distances_do_not_depend_on_the_blas_thread_count(similarity: str) -> None:
    rng = np.random.default_rng(0)
    gradients = rng.standard_normal((60, 7850)).astype(np.float32)
    results = []
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(limits=threads, user_api="blas"):
            rows = [distance_rows(gradients, np.arange(k), similarity=similarity) for k in (1, 3, 6, 10)]
            full = pairwise_distances(gradients, similarity=similarity)
            updated = update_distances(full, gradients, [4, 17, 33], similarity=similarity)
        results.append([*rows, full, updated])
    for one, two in zip(*results, strict=True):
        np.testing.assert_array_equal(one, two)
