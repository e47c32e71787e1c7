"""A MNIST-1D style generator: ten 1-D waveform classes distorted by random geometric transforms and noise.

The idea (Greydanus, "Scaling down deep learning", 2020) is a dataset small enough for a CPU yet
hard enough that model choice matters. This is our own generator, written from that description:
our own templates and transforms, vectorised over samples, driven by a numpy ``Generator``.

Generation of one sample of class ``c`` (all steps are applied to every sample at once):

1. **Template.** ``T_c``: 12 control points in ``[-1, 1]`` (see :data:`TEMPLATES`), read as a
   piecewise-linear curve on ``[0, 1]``.
2. **Padding.** The curve occupies a window of relative width ``w ~ U(template_width)`` of the
   output domain, preceded by a random left margin ``a ~ U(0, 1 - w)``; the rest is zero padding.
3. **Scale.** The amplitude is multiplied by ``s ~ U(amplitude)``.
4. **Shear.** A linear ramp ``h (u - 1/2)`` with ``h ~ U(-max_shear, max_shear)`` is added, ``u``
   the position in ``[0, 1]``.
5. **Resampling.** The curve is evaluated at ``length`` equally spaced points (40 by default).
6. **Translation.** The sampled signal is rolled circularly by an integer
   ``k ~ U{-max_translation, ..., max_translation}``.
7. **Correlated noise.** White noise smoothed by a circular Gaussian filter of standard deviation
   ``correlation_length`` (in points), rescaled to standard deviation ``correlated_noise``.
8. **Independent noise.** i.i.d. ``N(0, iid_noise^2)`` per point.

Classes are balanced: ``num_samples`` labels are ``0..9`` repeated, in random order.
"""

from __future__ import annotations

import numpy as np

from fedsample._arrays import FloatArray
from fedsample._memory import check_fits_in_memory
from fedsample._validation import Interval, check_param, invalid
from fedsample.data._checks import check_int
from fedsample.data.dataset import ArrayDataset
from fedsample.rng import check_generator

__all__ = ["TEMPLATES", "make_mnist1d"]

# Ten waveforms of our own design, 12 control points each, chosen to differ in the number,
# place and sign of their extrema so that each class keeps an identity under the distortions.
TEMPLATES: FloatArray = np.array(
    [
        [0.0, 0.2, 0.5, 0.8, 1.0, 1.0, 1.0, 1.0, 0.8, 0.5, 0.2, 0.0],  # 0: wide plateau
        [0.0, 0.0, 0.0, 0.0, 0.2, 1.0, 1.0, 0.2, 0.0, 0.0, 0.0, 0.0],  # 1: narrow spike
        [0.0, 1.0, 0.3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3, 1.0, 0.0],  # 2: two edge peaks
        [0.0, 0.5, 0.9, 0.9, 0.5, 0.0, -0.5, -0.9, -0.9, -0.5, 0.0, 0.0],  # 3: one sine period
        [-1.0, -0.6, -0.2, 0.2, 0.6, 1.0, -1.0, -0.6, -0.2, 0.2, 0.6, 1.0],  # 4: two saw teeth
        [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # 5: step up
        [1.0, 0.6, 0.2, -0.2, -0.6, -1.0, -1.0, -0.6, -0.2, 0.2, 0.6, 1.0],  # 6: valley
        [1.0, -1.0, 0.8, -0.8, 0.6, -0.6, 0.4, -0.4, 0.2, -0.2, 0.0, 0.0],  # 7: damped zig-zag
        [0.0, 0.0, -1.0, -1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, -1.0, -1.0],  # 8: dip, bump, dip
        [-1.0, -1.0, -1.0, -0.3, -0.3, -0.3, 0.3, 0.3, 0.3, 1.0, 1.0, 1.0],  # 9: staircase
    ]
)
TEMPLATES.flags.writeable = False


def _check_range(name: str, value: object, low: float, high: float | None) -> tuple[float, float]:
    constraint = f"a pair (low, high) with {low} <= low <= high" + ("" if high is None else f" <= {high}")
    try:
        lo, hi = (float(v) for v in value)  # type: ignore[attr-defined]
    except (TypeError, ValueError) as exc:
        raise invalid(name, "make_mnist1d", constraint, value) from exc
    if not (low <= lo <= hi and (high is None or hi <= high)):
        raise invalid(name, "make_mnist1d", constraint, value)
    return lo, hi


def _smooth_circular(noise: FloatArray, width: float) -> FloatArray:
    """Circular convolution of each row with a unit-energy Gaussian kernel (via the FFT)."""
    length = noise.shape[1]
    if width <= 0:
        return noise
    offsets = np.minimum(np.arange(length), length - np.arange(length))
    kernel = np.exp(-0.5 * (offsets / width) ** 2)
    kernel /= np.sqrt(np.sum(kernel**2))  # white noise of unit variance stays of unit variance
    return np.fft.irfft(np.fft.rfft(noise, axis=1) * np.fft.rfft(kernel), n=length, axis=1)


def make_mnist1d(
    num_samples: int,
    *,
    rng: np.random.Generator,
    length: int = 40,
    template_width: tuple[float, float] = (0.5, 0.8),
    amplitude: tuple[float, float] = (0.7, 1.3),
    max_shear: float = 0.6,
    max_translation: int = 3,
    correlated_noise: float = 0.25,
    correlation_length: float = 2.0,
    iid_noise: float = 0.1,
) -> ArrayDataset:
    """Draw ``num_samples`` MNIST-1D style signals (10 classes, features ``(N, length)`` float32).

    See the module docstring for the generative process; the defaults give a task that a linear
    model learns well above chance but not perfectly, and on which a small MLP or CNN does better.

    Parameters
    ----------
    num_samples:
        Number of signals ``N``; refused when its arrays would not fit in this machine's memory.
    rng:
        The only source of randomness: equal generators give identical datasets.
    length:
        Points per signal.
    template_width:
        Range of the template's relative width in the signal (the rest is zero padding).
    amplitude:
        Range of the amplitude scale factor.
    max_shear:
        Largest slope of the added linear ramp.
    max_translation:
        Largest circular shift, in points.
    correlated_noise, correlation_length:
        Standard deviation and smoothing width (in points) of the correlated noise.
    iid_noise:
        Standard deviation of the independent noise.

    >>> data = make_mnist1d(20, rng=np.random.default_rng(0))
    >>> data.features.shape, data.features.dtype, data.num_classes
    ((20, 40), dtype('float32'), 10)
    """
    owner = "make_mnist1d"
    n = check_int("num_samples", owner, num_samples, 1)
    rng = check_generator(rng, owner)
    points = check_int("length", owner, length, 2)
    width_lo, width_hi = _check_range("template_width", template_width, 0.05, 1.0)
    amp_lo, amp_hi = _check_range("amplitude", amplitude, 0.0, None)
    nonnegative = Interval(float, 0, None, closed="left")
    for name, value in (
        ("max_shear", max_shear),
        ("correlated_noise", correlated_noise),
        ("correlation_length", correlation_length),
        ("iid_noise", iid_noise),
    ):
        check_param(name, owner, value, nonnegative)
    shift_limit = check_int("max_translation", owner, max_translation, 0, points)
    # About ten float64 arrays of shape (num_samples, length) are alive at once, and a few per sample
    # (measured peak: 9.8 of them at length 40, tracemalloc); refused before any is drawn.
    what = f"{n} signals of {points} points and their working arrays"
    check_fits_in_memory("num_samples", owner, num_samples, n * (80.0 * points + 64.0), what)

    num_classes, num_points = TEMPLATES.shape
    labels = rng.permutation(np.arange(n, dtype=np.int64) % num_classes)
    width = rng.uniform(width_lo, width_hi, size=n)
    left = rng.uniform(0.0, 1.0, size=n) * (1.0 - width)
    scale = rng.uniform(amp_lo, amp_hi, size=n)
    shear = rng.uniform(-float(max_shear), float(max_shear), size=n)
    shift = rng.integers(-shift_limit, shift_limit, endpoint=True, size=n)

    # Steps 2 and 5: position of every output point inside its template, in control-point units.
    u = np.linspace(0.0, 1.0, points)
    t = (u[None, :] - left[:, None]) / width[:, None] * (num_points - 1)
    inside = (t >= 0.0) & (t <= num_points - 1)
    base = np.clip(np.floor(t), 0, num_points - 2).astype(np.int64)
    frac = np.clip(t - base, 0.0, 1.0)
    rows = TEMPLATES[labels]
    curve = (1.0 - frac) * np.take_along_axis(rows, base, axis=1) + frac * np.take_along_axis(rows, base + 1, axis=1)
    signal = np.where(inside, curve, 0.0) * scale[:, None]  # step 3
    signal += shear[:, None] * (u[None, :] - 0.5)  # step 4
    # Step 6: a circular roll by a per-sample amount, as one gather.
    columns = (np.arange(points)[None, :] - shift[:, None]) % points
    signal = np.take_along_axis(signal, columns, axis=1)
    # Step 7; the circular filter keeps the noise stationary, like the circular translation.
    signal += float(correlated_noise) * _smooth_circular(rng.standard_normal((n, points)), float(correlation_length))
    signal += float(iid_noise) * rng.standard_normal((n, points))  # step 8
    return ArrayDataset(
        features=signal.astype(np.float32),
        targets=labels,
        num_classes=num_classes,
        task="classification",
        name="mnist1d",
    )
