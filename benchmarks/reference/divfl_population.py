"""The made-up federation of the DivFL comparison and its round mechanics, numpy only (issue 25, item 5).

Imported by both sides: ``divfl_authors.py`` in the side environment (numpy 1.x) and
``compare_divfl.py`` in fedsample's. Per seed, ``n`` clients hold data of the FedProx "synthetic(1, 1)"
kind that melodi-lab/divfl's experiments use (``data/synthetic_1_1/generate_synthetic.py``: each
client has its own softmax model ``W_k ~ N(u_k, 1)``, ``u_k ~ N(0, 1)``, and feature mean
``v_k ~ N(B_k, 1)``, ``B_k ~ N(0, 1)``, covariance ``diag(j^-1.2)``), 60 features and 10 classes, with
lognormal sizes. The model is the authors' ``mclr`` (multinomial logistic regression, 610
parameters: the kernel then the bias, as ``process_grad`` flattens them). A round: the server's model
``w``; each selected client runs one epoch of mini-batch SGD (batch 10, learning rate 0.01) from
``w`` in an order keyed by ``(seed, round, client)``; the server averages the models weighted by
sample count (``BaseFedarated.aggregate``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FEATURES = 60
CLASSES = 10
BATCH = 10
LR = 0.01


@dataclass(frozen=True)
class Population:
    features: list[np.ndarray]
    labels: list[np.ndarray]

    @property
    def sizes(self) -> np.ndarray:
        return np.array([y.size for y in self.labels], dtype=np.int64)


def population(seed: int, num_clients: int) -> Population:
    """Seed ``seed``'s clients (synthetic(1, 1), sizes ``20 + lognormal(3, 1)`` capped at 400)."""
    rng = np.random.default_rng([25, seed])
    sizes = np.minimum(20 + rng.lognormal(3.0, 1.0, size=num_clients).astype(np.int64), 400)
    scale = np.arange(1, FEATURES + 1, dtype=np.float64) ** -1.2
    features, labels = [], []
    for k in range(num_clients):
        u, b_mean = rng.normal(0.0, 1.0), rng.normal(0.0, 1.0)
        weights = rng.normal(u, 1.0, size=(FEATURES, CLASSES))
        bias = rng.normal(u, 1.0, size=CLASSES)
        mean = rng.normal(b_mean, 1.0, size=FEATURES)
        x = rng.normal(mean, np.sqrt(scale), size=(int(sizes[k]), FEATURES))
        features.append(x)
        labels.append(np.argmax(x @ weights + bias, axis=1))
    return Population(features, labels)


def initial_model(seed: int) -> np.ndarray:
    """The flattened ``(W, b)`` every run starts from (small random kernel, zero bias)."""
    rng = np.random.default_rng([26, seed])
    return np.concatenate([rng.normal(0.0, 0.01, size=FEATURES * CLASSES), np.zeros(CLASSES)])


def _split(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return w[: FEATURES * CLASSES].reshape(FEATURES, CLASSES), w[FEATURES * CLASSES :]


def _loss_and_gradient(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    kernel, bias = _split(w)
    logits = x @ kernel + bias
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    loss = float(-np.log(p[np.arange(y.size), y] + 1e-300).mean())
    p[np.arange(y.size), y] -= 1.0
    p /= y.size
    return loss, np.concatenate([(x.T @ p).ravel(), p.sum(axis=0)])


def full_gradient(w: np.ndarray, pop: Population, client: int) -> np.ndarray:
    """The gradient of client ``client``'s mean loss over all its data at ``w`` (``Model.get_gradients``)."""
    return _loss_and_gradient(w, pop.features[client], pop.labels[client])[1]


def gradients(w: np.ndarray, pop: Population, clients: np.ndarray) -> np.ndarray:
    return np.stack([full_gradient(w, pop, int(k)) for k in clients])


def train(w: np.ndarray, pop: Population, client: int, seed: int, round_index: int) -> np.ndarray:
    """One epoch of mini-batch SGD from ``w`` on the client's data, in an order keyed by seed, round, client."""
    x, y = pop.features[client], pop.labels[client]
    order = np.random.default_rng([27, seed, round_index, client]).permutation(y.size)
    model = w.copy()
    for start in range(0, y.size, BATCH):
        rows = order[start : start + BATCH]
        model -= LR * _loss_and_gradient(model, x[rows], y[rows])[1]
    return model


def aggregate(models: list[np.ndarray], sizes: np.ndarray) -> np.ndarray:
    """The sample-count-weighted mean of the models (``BaseFedarated.aggregate``)."""
    weights = np.asarray(sizes, dtype=np.float64)
    return np.einsum("k,kd->d", weights / weights.sum(), np.stack(models))


def objective(w: np.ndarray, pop: Population, selected: np.ndarray) -> float:
    """DivFL's objective at the round's model: ``G(S) / n = mean_i min_{k in S} ||g_i(w) - g_k(w)||``."""
    every = gradients(w, pop, np.arange(len(pop.labels)))
    distances = np.linalg.norm(every[:, None, :] - every[None, np.asarray(selected, dtype=np.int64), :], axis=2)
    return float(distances.min(axis=1).mean())


def training_loss(w: np.ndarray, pop: Population) -> float:
    """The federation's objective ``sum_i p_i L_i(w)`` with ``p_i = n_i / M``."""
    sizes = pop.sizes
    losses = np.array([_loss_and_gradient(w, x, y)[0] for x, y in zip(pop.features, pop.labels, strict=True)])
    return float(losses @ sizes / sizes.sum())
