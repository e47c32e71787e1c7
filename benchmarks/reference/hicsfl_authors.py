"""CityChan/HiCS-FL's client selection as released, run on given output-layer updates (issue 28, item 6).

Runs in the side environment of ``fedcor_hicsfl_env.sh hicsfl`` (numpy, scipy, scikit-learn)::

    $REF/venv-hicsfl/bin/python benchmarks/reference/hicsfl_authors.py --input cases.json --output out.json

``server/server_hics.py`` (commit ``25f309d``) imports the authors' whole training stack at module level
(torch, torchvision, their CNNs and data loaders, ``progress``), so this driver reads the class
``Server_HiCS``'s selection methods out of the file's syntax tree, unmodified, and binds them to an
object holding what they read (``args``, ``n_samples``, ``weights``): ``magnitude_gradient``,
``estimated_entropy_from_grad``, ``estimated_entropy``, ``get_matrix_similarity_from_grads_entropy``,
``cluster_sampling`` and ``sample_clients_entropy``. ``clustering.py`` imports numpy and scipy only and
is imported whole (``get_similarity``, ``get_clusters_with_alg2``, ``sample_clients``).

Per case (a round after the warm-up: every client's last output-layer update ``[W_i, b_i]``, as
``get_gradients_fc`` returns them, float32 as torch's parameters are), the output holds the estimated
entropies, the dissimilarity matrix, which branch ``cluster_sampling`` takes (its ``var(H) < 0.1``
test), the cluster labels of the cluster-level branch (``AgglomerativeClustering`` as
``cluster_sampling`` calls it) and how often each client is chosen over ``draws`` rounds, each drawn as
``cluster_sampling`` draws it: ``sample_clients_entropy`` on those clusters, or in the other branch
``get_clusters_with_alg2`` (which shuffles) and ``sample_clients``, from numpy's global generator seeded
by the case. ``cluster_sampling``'s printing goes to /dev/null.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import itertools
import json
import pathlib
import warnings
from types import ModuleType
from typing import Any

import numpy as np
import scipy.cluster.hierarchy
import scipy.stats
from numpy.random import choice
from scipy.cluster.hierarchy import linkage
from sklearn.cluster import AgglomerativeClustering

METHODS = (
    "cluster_sampling",
    "magnitude_gradient",
    "estimated_entropy_from_grad",
    "estimated_entropy",
    "get_matrix_similarity_from_grads_entropy",
    "sample_clients_entropy",
)


def load_clustering(source_dir: pathlib.Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("released_clustering", source_dir / "clustering.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def server_class(source_dir: pathlib.Path, clustering: ModuleType) -> type:
    """A class holding ``Server_HiCS``'s selection methods, compiled from server_hics.py's syntax tree."""
    path = source_dir / "server" / "server_hics.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    (server,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Server_HiCS"]
    methods = [node for node in server.body if isinstance(node, ast.FunctionDef) and node.name in METHODS]
    assert {m.name for m in methods} == set(METHODS)
    body = ast.ClassDef(name="Selection", bases=[], keywords=[], body=methods, decorator_list=[])
    namespace: dict[str, Any] = {
        "np": np,
        "scipy": scipy,
        "linkage": linkage,
        "AgglomerativeClustering": AgglomerativeClustering,
        "choice": choice,
        "product": itertools.product,
        "get_similarity": clustering.get_similarity,
        "get_clusters_with_alg2": clustering.get_clusters_with_alg2,
        "sample_clients": clustering.sample_clients,
    }
    module = ast.fix_missing_locations(ast.Module(body=[body], type_ignores=[]))
    exec(compile(module, str(path), "exec"), namespace)  # as written
    cls: type = namespace["Selection"]
    return cls


def run(cls: type, clustering: ModuleType, case: dict[str, Any]) -> dict[str, Any]:
    n = int(case["num_clients"])
    server = cls()
    server.args = dict(case["args"])
    server.n_samples = np.asarray(case["sizes"])
    server.weights = server.n_samples / np.sum(server.n_samples)
    gradients = [
        [np.asarray(w, dtype=np.float32), np.asarray(b, dtype=np.float32)]
        for w, b in zip(case["weights"], case["biases"], strict=True)
    ]
    epoch = int(case["epoch"])
    with contextlib.redirect_stdout(io.StringIO()):
        magnitudes = server.magnitude_gradient(gradients)
        entropies = server.estimated_entropy_from_grad(magnitudes)
        similarity = server.get_matrix_similarity_from_grads_entropy(gradients, entropies, distance_type="cosine")
        cluster_branch = bool(np.array(entropies).var() < 0.1)
        out: dict[str, Any] = {
            "entropies": [float(h) for h in entropies],
            "similarity": np.asarray(similarity).tolist(),
            "cluster_branch": cluster_branch,
        }
        counts = np.zeros(n)
        np.random.seed(int(case["seed"]))  # noqa: NPY002 - the released draws read numpy's global generator
        draws = int(case["draws"])
        if cluster_branch:
            hc = AgglomerativeClustering(n_clusters=server.args["M"], metric="euclidean", linkage="ward")
            hc.fit_predict(similarity)
            clusters = [np.where(hc.labels_ == k)[0] for k in range(server.args["M"])]
            out["labels"] = [int(k) for k in hc.labels_]
            average = server.estimated_entropy(entropies, clusters)
            for _ in range(draws):
                for client in server.sample_clients_entropy(average, clusters, server.n_samples, epoch):
                    counts[int(client)] += 1
        else:
            tree = linkage(similarity, "ward")
            for _ in range(draws):
                rows = clustering.get_clusters_with_alg2(tree, max(int(server.args["frac"] * n), 1), server.weights)
                for client in clustering.sample_clients(rows):
                    counts[int(client)] += 1
        out["counts"] = counts.tolist()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=pathlib.Path, default=pathlib.Path("/tmp/fedsample-reference/hicsfl-src"))
    parser.add_argument("--check-source", type=pathlib.Path, help="only check that the methods compile, then exit")
    parser.add_argument("--input", type=pathlib.Path)
    parser.add_argument("--output", type=pathlib.Path)
    options = parser.parse_args(argv)
    # server_hics.py silences every warning at import (warnings.filterwarnings('ignore')); SciPy warns
    # that the square matrix it is given looks like a distance matrix (it is one, read as observations).
    warnings.filterwarnings("ignore", category=scipy.cluster.hierarchy.ClusterWarning)
    if options.check_source is not None:
        server_class(options.check_source, load_clustering(options.check_source))
        source = (options.check_source / "SOURCE.txt").read_text().strip()
        print(f"hicsfl_authors.py: Server_HiCS's selection methods compile ({source})")
        return 0
    if options.input is None or options.output is None:
        parser.error("--input and --output are needed (or --check-source)")
    clustering = load_clustering(options.source)
    cls = server_class(options.source, clustering)
    cases = json.loads(options.input.read_text())
    options.output.write_text(json.dumps({"cases": [run(cls, clustering, case) for case in cases]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
