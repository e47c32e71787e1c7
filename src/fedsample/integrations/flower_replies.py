"""Replies are data: the checks every value a node sends passes before it touches the model or a sampler.

:class:`~fedsample.integrations.flower.FedsampleStrategy` asks its nodes for precise things: a
trained copy of the global model (the same names, shapes and a numeric dtype), a few metrics
(``local-steps``, ``local-lr``, ``num-examples``, losses and norms), a size and a client id, or the
norms of an update. Each reader here takes what a node sent and returns either the value, converted
to what the server asked for, or the problem with it. None of them raises: a bad reply is a failure
of its node, counted in the round (``malformed``, or ``rejected`` for an update that is not finite
once converted to the model's dtype), never an exception out of the strategy.

Arrays are decoded from their ``.npy`` bytes here, not by ``Array.numpy()``: the header is read
first (a shape or dtype other than the model's is refused before any memory is allocated for
it), and only ``numpy.ndarray``-serialized arrays of real floating or integer dtypes are read.

Requires the ``flower`` extra.
"""

from __future__ import annotations

import io
import math
import numbers
from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np

from fedsample.integrations._flwr import Array, MetricRecord, RecordDict
from fedsample.integrations.flower_client import reply_arrays

__all__ = [
    "LOCAL_LR_RANGE",
    "MAX_LOCAL_STEPS",
    "MAX_NUM_EXAMPLES",
    "NormReport",
    "ReadArrays",
    "SizeAnswer",
    "check_train_metrics",
    "read_arrays",
    "read_count",
    "read_norm_report",
    "read_real",
    "read_size_answer",
]

# The ranges a node's metrics must fall in. A local learning rate outside [1e-10, 1e4] is no rate in
# use (the usual ones are 1e-4 to 1); more than a million local steps, or a client of more than 2**40
# samples (a trillion), is no round a server asked for. The client sizes' bound also keeps the
# federation's total M = sum n_i within int64 for up to 2**22 nodes.
LOCAL_LR_RANGE: tuple[float, float] = (1e-10, 1e4)
MAX_LOCAL_STEPS = 10**6
MAX_NUM_EXAMPLES = 2**40
_NUMPY_STYPE = "numpy.ndarray"  # flwr.common.constant.SType.NUMPY
_MAX_HEADER = 10_000  # numpy's own default cap on an .npy header


class ReadArrays(NamedTuple):
    """A training reply's arrays in the model's dtypes (``None`` when refused), the failure kind
    (``""``, ``"malformed"`` or ``"rejected"``) and the problem in words."""

    arrays: dict[str, np.ndarray] | None
    kind: str
    problem: str


class SizeAnswer(NamedTuple):
    """A node's answer to the size (or client-id) query: its size, its client id (``None`` when not
    asked or not given) and the problem (``""`` when valid)."""

    size: int | None
    client_id: int | None
    problem: str


class NormReport(NamedTuple):
    """A node's answer to the first message of a two-phase round (``None`` where not given)."""

    update_norm: float
    gradient_norm: float | None
    local_lr: float | None
    local_steps: int | None


# --- numbers --------------------------------------------------------------------------------------


def read_count(value: object, low: int, high: int) -> int | None:
    """``value`` as an int in ``[low, high]``: an int, or a float that is exactly one; else ``None``.

    ``2.5`` is refused, not rounded; booleans, NaN and infinities are refused.
    """
    if isinstance(value, bool | np.bool_):
        return None
    if isinstance(value, numbers.Integral):
        count = int(value)
    elif isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number) or not number.is_integer():
            return None
        count = int(number)
    else:
        return None
    return count if low <= count <= high else None


def read_real(value: object, low: float, high: float, *, low_open: bool = False) -> float | None:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``); else ``None``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond the largest float
        return None
    if not math.isfinite(number) or number > high or number < low or (low_open and number == low):
        return None
    return number


def _read_lr(value: object) -> float | None:
    return read_real(value, *LOCAL_LR_RANGE)


def _read_steps(value: object) -> int | None:
    return read_count(value, 1, MAX_LOCAL_STEPS)


def _read_size(value: object) -> int | None:
    return read_count(value, 0, MAX_NUM_EXAMPLES)  # train_reply's own range


def _read_finite(value: object) -> float | None:
    return read_real(value, -math.inf, math.inf)


def _read_magnitude(value: object) -> float | None:
    return read_real(value, 0.0, math.inf)


# The metrics a training reply may carry, each read by its check (the other keys are not read).
_TRAIN_METRICS: dict[str, Callable[[object], float | None]] = {
    "num-examples": _read_size,
    "local-steps": _read_steps,
    "local-lr": _read_lr,
    "train-loss": _read_finite,
    "train-loss-squares": _read_magnitude,
    "gradient-norm": _read_magnitude,
}


def check_train_metrics(metrics: MetricRecord) -> str:
    """The problem with a training reply's metrics (``""`` when each one it carries is in range).

    ``fit-seconds`` is not checked here: an invalid one only makes the client's round time unknown
    (:func:`~fedsample.integrations.flower_feedback.round_times`).
    """
    for key, read in _TRAIN_METRICS.items():
        if key in metrics and read(metrics[key]) is None:
            return f"metric {key!r} = {_show(metrics[key])} out of its range"
    return ""


def read_size_answer(metrics: MetricRecord, *, asked: str, num_clients: int) -> SizeAnswer:
    """A node's answer to the ``num-examples`` query (its size, and a client id if it gives one) or to
    the ``client-id`` query (FedSampling's: a client id alone, if it gives one)."""
    size = None
    if asked == "num-examples":
        size = read_count(metrics.get("num-examples"), 1, MAX_NUM_EXAMPLES)
        if size is None:
            return SizeAnswer(None, None, f"'num-examples' = {_show(metrics.get('num-examples'))}")
    if "client-id" not in metrics:  # the ids then follow the node ids (FedsampleStrategy's rule)
        return SizeAnswer(size, None, "")
    client_id = read_count(metrics.get("client-id"), 0, num_clients - 1)
    if client_id is None:
        return SizeAnswer(None, None, f"'client-id' = {_show(metrics.get('client-id'))} (of {num_clients} clients)")
    return SizeAnswer(size, client_id, "")


def read_norm_report(metrics: MetricRecord) -> tuple[NormReport | None, str]:
    """A node's norms for the first message of a two-phase round: ``update-norm`` (finite, ``>= 0``)
    and, if given, ``gradient-norm``, ``local-lr`` and ``local-steps`` in their ranges."""
    norm = read_real(metrics.get("update-norm"), 0.0, math.inf)
    if norm is None:
        return None, f"'update-norm' = {_show(metrics.get('update-norm'))}"
    problem = check_train_metrics(metrics)
    if problem:
        return None, problem
    return NormReport(
        update_norm=norm,
        gradient_norm=_read_magnitude(metrics.get("gradient-norm")),
        local_lr=_read_lr(metrics.get("local-lr")),
        local_steps=_read_steps(metrics.get("local-steps")),
    ), ""


def _show(value: object) -> str:
    return f"{value!r:.60}"


# --- arrays ---------------------------------------------------------------------------------------


def read_arrays(content: RecordDict, theta: Mapping[str, np.ndarray]) -> ReadArrays:
    """A training reply's arrays, each decoded and converted to its global array's dtype.

    ``malformed``: no array record, other names than the model's, or an array that is not a
    ``numpy.ndarray`` serialization of the model's shape with a real floating or integer dtype that
    converts to the model's (an integer beyond the model's exact range included: ``2**62`` for
    float32). ``rejected``: the converted update holds a NaN or an infinity (a float64 ``1e300``
    becomes ``inf`` in float32).
    """
    record = reply_arrays(content)
    if record is None:
        return ReadArrays(None, "malformed", "no ArrayRecord in the reply")
    if set(record) != set(theta):
        return ReadArrays(None, "malformed", f"arrays named {sorted(record)!r:.200} instead of {sorted(theta)}")
    arrays = {}
    for name in theta:
        value, problem = _decode(record[name], theta[name])
        if value is None:
            return ReadArrays(None, "malformed", f"array {name!r}: {problem}")
        with np.errstate(over="ignore", invalid="ignore"):
            converted = value.astype(theta[name].dtype)
        if converted.dtype.kind == "f" and not np.all(np.isfinite(converted)):
            return ReadArrays(None, "rejected", f"array {name!r}: non-finite in {theta[name].dtype}")
        arrays[name] = converted
    return ReadArrays(arrays, "", "")


def _decode(array: object, like: np.ndarray) -> tuple[np.ndarray | None, str]:
    """The array a node sent, read from its ``.npy`` bytes after its header was checked against ``like``."""
    if not isinstance(array, Array):
        return None, f"a {type(array).__name__}, not an Array"
    if array.stype != _NUMPY_STYPE:
        return None, f"serialization type {array.stype!r:.60}"
    data: object = array.data
    if not isinstance(data, bytes):
        return None, "no bytes"
    stream = io.BytesIO(data)
    # The bytes are the node's: any failure to parse them means a malformed array.
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream, max_header_size=_MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream, max_header_size=_MAX_HEADER)
        else:
            return None, f".npy format version {version}"
    except Exception as error:  # untrusted bytes: every failure to parse them is the node's
        return None, f"unreadable .npy bytes ({type(error).__name__})"
    if tuple(shape) != like.shape:
        return None, f"shape {tuple(shape)!r:.80} instead of {like.shape}"
    problem = _dtype_problem(dtype, like.dtype)
    if problem:
        return None, problem
    count = math.prod(like.shape)
    if len(data) - stream.tell() != count * dtype.itemsize:
        return None, f"{len(data) - stream.tell()} data bytes for {count} values of {dtype}"
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    value = flat.reshape(like.shape, order="F" if fortran else "C")
    if not _converts_exactly(value, like.dtype):
        return None, f"{dtype} values beyond {like.dtype}'s exact range"
    return value, ""


def _dtype_problem(dtype: np.dtype, target: np.dtype) -> str:
    """Why a node's dtype cannot stand for the model's ``target`` (``""`` when it can)."""
    if dtype.fields is not None or dtype.subdtype is not None or dtype.hasobject:
        return f"dtype {dtype} (not a plain number)"
    if target.kind == "f" and dtype.kind in "fiu":
        return ""
    if target.kind in "iu" and dtype.kind in "iu":
        return ""
    if target.kind not in "fiu" and dtype == target:
        return ""
    return f"dtype {dtype} for a {target} array"


def _converts_exactly(value: np.ndarray, target: np.dtype) -> bool:
    """Whether integers convert to ``target`` exactly: within ``+-2**(mantissa + 1)`` of a float dtype
    (``2**24`` for float32), within the range of an integer dtype."""
    if value.dtype.kind not in "iu" or value.size == 0:
        return True
    low, high = int(value.min()), int(value.max())
    if target.kind == "f":
        limit: int = 2 ** (int(np.finfo(target).nmant) + 1)
        return -limit <= low <= high <= limit
    if target.kind in "iu":
        info = np.iinfo(target)
        return int(info.min) <= low and high <= int(info.max)
    return True
