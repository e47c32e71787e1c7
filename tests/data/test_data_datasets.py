"""Embedded datasets: digits, MNIST-1D, OSMD's linear regression and 003's quadratic clients."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fedsample.data import (
    TEMPLATES,
    MissingDependencyError,
    QuadraticClients,
    heavy_first_importances,
    load_digits,
    make_mnist1d,
    make_osmd_linear_regression,
    make_quadratic_clients,
)
from fedsample.errors import FedsampleError

# --- digits ----------------------------------------------------------------------------------------


def test_load_digits_shapes_and_range() -> None:
    pytest.importorskip("sklearn")
    data = load_digits()
    assert data.features.shape == (1797, 64)
    assert data.features.dtype == np.float32
    assert float(data.features.min()) == 0.0
    assert float(data.features.max()) == 1.0
    assert data.targets.dtype == np.int64
    assert np.bincount(data.targets).size == 10
    assert data.num_classes == 10
    assert load_digits(as_images=True).features.shape == (1797, 1, 8, 8)


def test_load_digits_names_the_extra_when_scikit_learn_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    with pytest.raises(MissingDependencyError) as info:
        load_digits()
    assert "pip install 'fedsample[data]'" in str(info.value)
    assert isinstance(info.value, ImportError)
    assert isinstance(info.value, FedsampleError)


# --- MNIST-1D --------------------------------------------------------------------------------------


def test_mnist1d_shapes_balance_and_determinism() -> None:
    data = make_mnist1d(1000, rng=np.random.default_rng(0))
    assert data.features.shape == (1000, 40)
    assert data.features.dtype == np.float32
    assert data.targets.dtype == np.int64
    assert np.bincount(data.targets).tolist() == [100] * 10
    again = make_mnist1d(1000, rng=np.random.default_rng(0))
    assert np.array_equal(data.features, again.features)
    assert np.array_equal(data.targets, again.targets)
    other = make_mnist1d(1000, rng=np.random.default_rng(1))
    assert not np.array_equal(data.features, other.features)
    assert make_mnist1d(7, rng=np.random.default_rng(0), length=64).features.shape == (7, 64)
    assert TEMPLATES.shape == (10, 12)


def test_mnist1d_without_distortions_is_the_resampled_template() -> None:
    data = make_mnist1d(
        20,
        rng=np.random.default_rng(0),
        template_width=(1.0, 1.0),
        amplitude=(1.0, 1.0),
        max_shear=0.0,
        max_translation=0,
        correlated_noise=0.0,
        iid_noise=0.0,
        length=12,
    )
    # Full width on 12 points: the control points themselves.
    assert np.allclose(data.features, TEMPLATES[data.targets], atol=1e-6)


def test_mnist1d_is_learnable() -> None:
    train = make_mnist1d(3000, rng=np.random.default_rng(0))
    test = make_mnist1d(1000, rng=np.random.default_rng(1))
    # Least squares on one-hot targets.
    design = np.c_[train.features, np.ones(train.num_samples)]
    weights = np.linalg.lstsq(design, np.eye(10)[train.targets], rcond=None)[0]
    scores = np.c_[test.features, np.ones(test.num_samples)] @ weights
    assert np.mean(scores.argmax(axis=1) == test.targets) > 0.3  # chance is 0.1
    # Nearest centroid.
    centroids = np.stack([train.features[train.targets == c].mean(axis=0) for c in range(10)])
    distances = ((test.features[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    assert np.mean(distances.argmin(axis=1) == test.targets) > 0.3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"template_width": (0.9, 0.5)}, "'template_width' parameter of make_mnist1d"),
        ({"template_width": "wide"}, "'template_width' parameter of make_mnist1d"),
        ({"iid_noise": -0.1}, "'iid_noise' parameter of make_mnist1d must be a float in the range [0, inf)"),
        ({"max_translation": 41}, "'max_translation' parameter of make_mnist1d must be an int in the range [0, 40]"),
    ],
)
def test_mnist1d_rejects_bad_parameters(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(FedsampleError) as info:
        make_mnist1d(5, rng=np.random.default_rng(0), **kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)
    with pytest.raises(FedsampleError, match="'num_samples' parameter"):
        make_mnist1d(0, rng=np.random.default_rng(0))


# --- OSMD linear regression (paper 001) ------------------------------------------------------------


def test_osmd_regression_layout() -> None:
    data = make_osmd_linear_regression(sigma=3.0, rng=np.random.default_rng(0))
    assert data.task == "regression"
    assert data.num_classes is None
    assert data.num_clients == 100
    assert data.train_sizes().tolist() == [100] * 100
    assert data.train_features.shape == (10000, 10)
    assert data.train_features.dtype == np.float32
    assert data.train_targets.dtype == np.float32
    assert data.test_sizes().sum() == 0
    assert data.federation().importances.tolist() == [0.01] * 100
    again = make_osmd_linear_regression(sigma=3.0, rng=np.random.default_rng(0))
    assert np.array_equal(data.train_features, again.train_features)


def test_osmd_regression_data_model() -> None:
    data = make_osmd_linear_regression(num_clients=400, samples_per_client=400, sigma=1.0, rng=np.random.default_rng(2))
    w = data.metadata["true_weights"]
    s = data.metadata["client_scales"]
    d = data.metadata["feature_scales"]
    assert s.max() == pytest.approx(10.0)
    assert d.min() == pytest.approx(1 / 25)
    assert d.max() == pytest.approx(1.0)
    # log s_m is N(mu, sigma^2) shifted: its sample sd over 400 clients is within 15% of sigma = 1.
    assert np.std(np.log(s), ddof=1) == pytest.approx(1.0, rel=0.15)
    # Residual noise has sd 0.1 (float32 rounding of y is far below that).
    x = data.train_features.astype(np.float64)
    residual = data.train_targets - x @ w
    assert np.std(residual) == pytest.approx(0.1, rel=0.05)
    # Coordinate j of client m has standard deviation s_m d_j: check the pooled ratio.
    per_client = x.reshape(400, 400, 10) / (s[:, None, None] * d)
    assert np.std(per_client) == pytest.approx(1.0, rel=0.02)


def test_osmd_regression_heterogeneity_grows_with_sigma() -> None:
    spreads = []
    for sigma in (1.0, 3.0, 10.0):
        data = make_osmd_linear_regression(sigma=sigma, rng=np.random.default_rng(0))
        spreads.append(np.ptp(np.log(data.metadata["client_scales"])))
    assert spreads[0] < spreads[1] < spreads[2]
    with pytest.raises(FedsampleError, match="'sigma' parameter of make_osmd_linear_regression"):
        make_osmd_linear_regression(sigma=-1.0, rng=np.random.default_rng(0))


# --- quadratic clients (paper 003) -----------------------------------------------------------------


def test_quadratic_clients_iid_and_non_iid() -> None:
    iid = make_quadratic_clients(iid=True, rng=np.random.default_rng(0))
    assert iid.optima.shape == (10, 20)
    assert iid.optima.dtype == np.float64
    assert np.all(iid.optima == iid.optima[0])
    non_iid = make_quadratic_clients(num_clients=5, dim=3, iid=False, rng=np.random.default_rng(0))
    assert non_iid.num_clients == 5
    assert non_iid.dim == 3
    assert np.unique(non_iid.optima[:, 0]).size == 5


def test_quadratic_global_optimum_minimises_the_global_loss() -> None:
    clients = make_quadratic_clients(iid=False, rng=np.random.default_rng(1))
    p = heavy_first_importances(10, first=0.5)
    assert p.sum() == pytest.approx(1.0)
    optimum = clients.global_optimum(p)
    assert np.allclose(optimum, (p[:, None] * clients.optima).sum(axis=0))
    best = clients.global_loss(optimum, p)
    for direction in np.eye(20)[:3]:
        assert clients.global_loss(optimum + 1e-3 * direction, p) > best


def test_quadratic_local_updates_match_gradient_descent() -> None:
    clients = make_quadratic_clients(num_clients=4, dim=3, iid=False, rng=np.random.default_rng(2))
    theta = np.array([0.5, -1.0, 2.0])
    y = np.repeat(theta[None], 4, axis=0)
    for _ in range(10):
        y = y - 0.1 * (y - clients.optima)  # gradient of 1/2 ||y - theta_i*||^2
    assert np.allclose(clients.local_updates(theta, local_lr=0.1, local_steps=10), y - theta)


def test_quadratic_validation() -> None:
    with pytest.raises(FedsampleError, match="'optima' parameter of QuadraticClients"):
        QuadraticClients(optima=np.zeros(3))
    clients = make_quadratic_clients(num_clients=2, dim=2, iid=True, rng=np.random.default_rng(0))
    with pytest.raises(FedsampleError, match=r"'importances' parameter of QuadraticClients\.global_optimum"):
        clients.global_optimum([1.0, 0.0, 0.0])
    with pytest.raises(FedsampleError, match="'iid' parameter of make_quadratic_clients must be a bool"):
        make_quadratic_clients(iid=1, rng=np.random.default_rng(0))  # type: ignore[arg-type]
