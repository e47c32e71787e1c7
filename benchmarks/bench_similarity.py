"""Clustered sampling by model similarity (Algorithm 2 of paper 000): the cost of a round.

1. n = 1000 clients with d = 10^5 parameters, m = 10 clients returning per round. One
   ``SimilarityClusteredSampler.update`` (it recomputes the distance rows of the returned clients
   only, O(n m d)) against a naive round that recomputes all n^2 distances (O(n^2 d), what the
   complexity of Theorem 4 counts), measured in the same run and split into stages: distances,
   Ward's tree, cut and allocation, and the rest (the copy of the state's n x d gradient matrix
   that an immutable state needs, and the feedback checks).
2. ``projection_dim``: the same round with a count sketch to d' dimensions, and how much the
   sketch changes the clustering: adjusted Rand index of the sampler's groups, and of Ward's tree
   cut at the true number of clusters, against the uncompressed ones.
3. The price of thread-independent distances: the m distance rows with the cross term summed in a
   fixed order (numpy's einsum, what the sampler does, the same bits at any thread count) against
   a BLAS matrix product (faster, but its bits depend on the thread count), interleaved on the same
   inputs, at the BLAS thread count the process runs with.

The gradients are synthetic and clustered on two levels: 10 families of 10 clusters of 10
clients (a family's clusters are closer to each other than to other families'). With equal
sizes and m = 10 a group weighs at most 1/10, so the groups should be the families.

Run: ``python benchmarks/bench_similarity.py`` (add ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.cluster.hierarchy import fcluster

import fedsample
from fedsample import Federation, Feedback
from fedsample.samplers import SimilarityClusteredSampler, SimilarityState, adjusted_rand_index, cluster_labels
from fedsample.samplers import similarity as similarity_module
from fedsample.samplers.schemes.clustered import integer_masses
from fedsample.samplers.similarity.sampler import (
    allocate_clustered_rows,
    count_sketch,
    distance_rows,
    pairwise_distances,
    similarity_clustered_design,
    update_distances,
    ward_linkage,
)

FAMILIES, CLUSTERS_PER_FAMILY = 10, 10
CLUSTER_SPREAD = 0.7  # distance of a cluster's center from its family's, per coordinate
NOISE = 2.0  # a client's deviation from its cluster's center, per coordinate


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def clustered_gradients(
    num_clients: int, dim: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Float32 gradients (n, d), family and cluster labels, and the cluster centers."""
    num_clusters = FAMILIES * CLUSTERS_PER_FAMILY
    per_cluster = num_clients // num_clusters
    families = rng.standard_normal((FAMILIES, dim), dtype=np.float32)
    centers = np.repeat(families, CLUSTERS_PER_FAMILY, axis=0)
    centers += CLUSTER_SPREAD * rng.standard_normal((num_clusters, dim), dtype=np.float32)
    gradients = np.empty((num_clients, dim), dtype=np.float32)
    for c in range(num_clusters):  # block by block: no float64 copy of the whole matrix
        block = slice(c * per_cluster, (c + 1) * per_cluster)
        gradients[block] = centers[c] + NOISE * rng.standard_normal((per_cluster, dim), dtype=np.float32)
    cluster = np.repeat(np.arange(num_clusters), per_cluster)
    return gradients, cluster // CLUSTERS_PER_FAMILY, cluster, centers


def state_from(
    federation: Federation, m: int, gradients: np.ndarray, update_dim: int, similarity: Any, repeats: int = 1
) -> tuple[SimilarityState, float]:
    """A state in which every client has returned once, and the (smallest) time of its naive
    O(n^2 d) distance matrix."""
    t_full, distances = timed(lambda: pairwise_distances(gradients, similarity=similarity))
    for _ in range(repeats - 1):
        t_full = min(t_full, timed(lambda: pairwise_distances(gradients, similarity=similarity))[0])
    masses = integer_masses(federation, m)
    rows = similarity_clustered_design(distances, masses, m)
    gradients.flags.writeable = False  # the state takes the matrix without copying it
    state = SimilarityState(
        importances=federation.importances,
        num_sampled=m,
        masses=masses,
        gradients=gradients,
        update_dim=update_dim,
        distances=distances,
        groups=rows.groups,
        design=rows.design,
        round=0,
    )
    return state, t_full


def time_round(
    sampler: SimilarityClusteredSampler, state: SimilarityState, feedback: Feedback
) -> tuple[dict[str, float], SimilarityState]:
    """One update, timed whole, then its stages one by one on the same inputs."""
    clock = time.perf_counter
    start = clock()
    new_state = sampler.update(state, feedback)
    times = {"update": clock() - start}
    start = clock()
    distances = update_distances(state.distances, new_state.gradients, feedback.clients, similarity=sampler.similarity)
    times["distances"] = clock() - start
    start = clock()
    tree = ward_linkage(distances)
    times["linkage"] = clock() - start
    start = clock()
    allocate_clustered_rows(tree, state.masses, state.num_sampled)
    times["allocation"] = clock() - start
    return times, new_state


def bench_rounds(
    sampler: SimilarityClusteredSampler,
    state: SimilarityState,
    centers: np.ndarray,
    cluster: np.ndarray,
    rounds: int,
    rng: np.random.Generator,
) -> dict[str, float]:
    """Smallest time of each stage over ``rounds`` rounds in which the m drawn clients return (the
    least disturbed measurement)."""
    times: dict[str, list[float]] = {}
    for t in range(rounds):
        selection = sampler.sample(state, rng)
        clients = np.unique(selection.clients)
        updates = centers[cluster[clients]] + NOISE * rng.standard_normal((clients.size, centers.shape[1]))
        feedback = Feedback(round=t, selection=selection, clients=clients, updates=updates)
        round_times, state = time_round(sampler, state, feedback)
        for key, value in round_times.items():
            times.setdefault(key, []).append(value)
    out = {key: min(values) for key, values in times.items()}
    out["rest"] = max(0.0, out["update"] - out["distances"] - out["linkage"] - out["allocation"])
    return out


def bench_cross_term(gradients: np.ndarray, clients: np.ndarray, similarity: Any, repeats: int) -> dict[str, float]:
    """Smallest time of the distance rows of ``clients`` with each cross term, alternating between them."""
    fixed_order = similarity_module._fixed_order_dots
    kernels: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
        "fixed order (einsum)": fixed_order,
        "BLAS product": lambda probe, chunk: probe @ chunk.T,
    }
    best = dict.fromkeys(kernels, float("inf"))
    try:
        for _ in range(repeats):
            for name, kernel in kernels.items():
                similarity_module._fixed_order_dots = kernel
                elapsed, _ = timed(lambda: distance_rows(gradients, clients, similarity=similarity))
                best[name] = min(best[name], elapsed)
    finally:
        similarity_module._fixed_order_dots = fixed_order
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="n = 300, d = 10^4: a smoke run")
    parser.add_argument("--similarity", default="arccos", choices=["arccos", "l2", "l1"])
    parser.add_argument("--dims", default="100,1000,10000", help="projection dimensions d' to try")
    args = parser.parse_args()
    n, dim = (300, 10_000) if args.quick else (1000, 100_000)
    m, rounds = 10, 3 if args.quick else 5
    dims = [int(x) for x in args.dims.split(",") if int(x) < dim]
    print(
        f"fedsample {fedsample.__version__}, numpy {np.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs"
    )
    rng = np.random.default_rng(0)
    gradients, family, cluster, centers = clustered_gradients(n, dim, rng)
    federation = Federation.from_sizes(np.full(n, 500))
    sampler = SimilarityClusteredSampler(similarity=args.similarity)

    # [1] One round, incremental against naive.
    state, t_full = state_from(federation, m, gradients, dim, args.similarity, repeats=2)
    stages = bench_rounds(sampler, state, centers, cluster, rounds, np.random.default_rng(1))
    naive = t_full + stages["linkage"] + stages["allocation"] + stages["rest"]
    print(
        f"\n[1] one round of Algorithm 2, n = {n}, d = {dim:,}, m = {m} returned, {args.similarity} "
        f"(best of {rounds} rounds)"
    )
    print(f"    {'stage':<34}{'incremental':>12}{'naive':>12}")
    print(f"    {'distances (O(n m d) / O(n^2 d))':<34}{stages['distances']:11.3f}s{t_full:11.3f}s")
    print(f"    {'Ward linkage (condensed matrix)':<34}{stages['linkage']:11.3f}s{stages['linkage']:11.3f}s")
    print(f"    {'tree cut and allocation':<34}{stages['allocation']:11.3f}s{stages['allocation']:11.3f}s")
    print(f"    {'rest (state copy, checks)':<34}{stages['rest']:11.3f}s{stages['rest']:11.3f}s")
    print(f"    {'round':<34}{stages['update']:11.3f}s{naive:11.3f}s")
    print(
        f"    naive / incremental: {naive / stages['update']:.1f}x per round, "
        f"{t_full / stages['distances']:.1f}x on the distances"
    )

    # [2] Projection: time and agreement with the uncompressed clustering.
    reference = cluster_labels(state)
    reference_tree = fcluster(ward_linkage(state.distances), t=family.size // 10, criterion="maxclust")
    print(
        f"\n[2] count sketch to d' dimensions ({FAMILIES} families x {CLUSTERS_PER_FAMILY} clusters "
        f"x {n // 100} clients)"
    )
    print(f"    {'d_prime':>8}{'sketch n':>10}{'round':>9}  {'ARI groups':>11}{'ARI tree':>10}{'groups=families':>17}")
    print(
        f"    {'none':>8}{'':>10}{stages['update']:8.3f}s  {1.0:11.3f}{1.0:10.3f}"
        f"{adjusted_rand_index(reference, family):17.3f}"
    )
    for d_prime in dims:
        projected = SimilarityClusteredSampler(similarity=args.similarity, projection_dim=d_prime)
        sketch = count_sketch(dim, d_prime, projected.projection_seed)
        start = time.perf_counter()
        sketched = sketch.project(gradients).astype(np.float32)
        t_sketch = time.perf_counter() - start
        p_state, _ = state_from(federation, m, sketched, dim, args.similarity)
        p_stages = bench_rounds(projected, p_state, centers, cluster, rounds, np.random.default_rng(1))
        tree = fcluster(ward_linkage(p_state.distances), t=family.size // 10, criterion="maxclust")
        print(
            f"    {d_prime:>8}{t_sketch:9.2f}s{p_stages['update']:8.3f}s  "
            f"{adjusted_rand_index(cluster_labels(p_state), reference):11.3f}"
            f"{adjusted_rand_index(tree, reference_tree):10.3f}"
            f"{adjusted_rand_index(cluster_labels(p_state), family):17.3f}"
        )
    print(
        "    ARI groups: the sampler's groups against the uncompressed ones; ARI tree: Ward's tree cut\n"
        "    into the 100 clusters, against the uncompressed tree's; groups=families: against the truth.\n"
        "    'sketch n' is the one-off sketch of all n gradients (a round sketches only the m returned)."
    )

    # [3] The fixed-order cross term against BLAS.
    blas_threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default"
    print(f"\n[3] distance rows of {m} clients, n = {n}, d = {dim:,}: cross term (best of 3, alternating)")
    for name, seconds in bench_cross_term(gradients, np.arange(m) * (n // m), args.similarity, 3).items():
        print(f"    {name:<22}{seconds:8.3f}s")
    print(f"    BLAS threads: {blas_threads} (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS)")


if __name__ == "__main__":
    main()
