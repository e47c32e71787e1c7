"""The system model: each client's compute speed and link, and the simulated time of its round.

Client ``i`` has a compute cost ``c_i`` (seconds per training sample, for a model of
``reference_parameters`` parameters), a download and an upload bandwidth ``down_i`` and ``up_i``
(megabits per second) and a latency ``l_i`` (seconds, each way). For a model of ``d`` parameters
sent as float32 (``32 d`` bits) and a round of ``N`` local steps of batch ``B``, its round time is

``T_i = (l_i + 32 d / (10^6 down_i)) + N B c_i d / reference_parameters + (l_i + 32 d / (10^6 up_i))``

(download, local work, upload). A two-phase round (a sampler whose candidates report before the
draw) is charged its first phase too: :meth:`ClientSystems.report_times` (receive, compute, report a
scalar; a loss evaluation costs :data:`FORWARD_SHARE` of a training sample) and
:meth:`ClientSystems.upload_times` (the chosen clients' rest). The values come from a distribution around the medians
(``"lognormal"``: ``median * exp(sigma Z)``; ``"loguniform"``: ``median * exp(sigma U)``,
``U ~ U(-1, 1)``; ``"constant"``: the medians), drawn once per run seed from the stream
``(seed, SYSTEM)``, or from a trace file (:func:`load_system_trace`, CSV or JSON; the latency is
then ``latency`` for everyone). ``deadline`` (seconds, ``None``: none) is the clock's: a client
whose round time exceeds it is *late* (:func:`fedsample.participation.procedure.settle_participants`).
docs/system.md describes the model, the trace format and the clock. Torch-free.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._params import declared
from fedsample._reading import open_input
from fedsample._validation import Constraint, Interval, NoneOr, Options, Text, check_params
from fedsample.errors import FedsampleError
from fedsample.rng import Stream, stream_rng

__all__ = ["FORWARD_SHARE", "SYSTEM", "SYSTEM_DISTRIBUTIONS", "ClientSystems", "SystemModel", "load_system_trace"]

# A loss evaluation's cost per sample, as a share of a training sample's (forward + backward): a
# forward pass is taken as one third of a training step. Our convention (docs/system.md).
FORWARD_SHARE = 1.0 / 3.0

SYSTEM_DISTRIBUTIONS: tuple[str, ...] = ("lognormal", "loguniform", "constant")
TRACE_COLUMNS: tuple[str, ...] = ("client", "compute", "upload", "download")
_BITS_PER_PARAMETER = 32
_TRACE_NAME = "system.trace"
_MAX_TRACE_BYTES = 1 << 30


@dataclass(frozen=True, eq=False)
class ClientSystems:
    """The clients' compute cost (s/sample), upload and download bandwidths (Mbit/s) and latency (s)."""

    compute: FloatArray
    upload: FloatArray
    download: FloatArray
    latency: FloatArray

    def round_times(self, clients: IntArray, samples: float, num_parameters: int, reference: float) -> FloatArray:
        """Seconds each of ``clients`` takes for a round of ``samples`` samples with a ``num_parameters`` model."""
        ids = np.asarray(clients, dtype=np.int64)
        megabits = _BITS_PER_PARAMETER * num_parameters / 1e6
        transfer = 2 * self.latency[ids] + megabits / self.download[ids] + megabits / self.upload[ids]
        out: FloatArray = transfer + samples * self.compute[ids] * (num_parameters / reference)
        return out

    def report_times(
        self,
        clients: IntArray,
        samples: IntArray | FloatArray | float,
        num_parameters: int,
        reference: float,
        *,
        work_share: float = 1.0,
    ) -> FloatArray:
        """Seconds each of ``clients`` takes to answer a two-phase round's first phase (docs/system.md).

        It receives the model, processes ``samples`` samples (one per client, or one for all) at
        ``work_share`` of a training sample's cost each (:data:`FORWARD_SHARE` for a loss evaluation,
        1 for training) and reports a scalar (a latency, no bandwidth term).
        """
        ids = np.asarray(clients, dtype=np.int64)
        megabits = _BITS_PER_PARAMETER * num_parameters / 1e6
        work = np.asarray(samples, dtype=np.float64) * self.compute[ids] * (num_parameters / reference) * work_share
        out: FloatArray = self.latency[ids] + megabits / self.download[ids] + work + self.latency[ids]
        return out

    def upload_times(self, clients: IntArray, samples: float, num_parameters: int, reference: float) -> FloatArray:
        """Seconds each of ``clients``, already holding the model, takes to train ``samples`` samples and upload.

        ``samples = 0`` for a client that trained in the first phase (it only sends its update).
        """
        ids = np.asarray(clients, dtype=np.int64)
        megabits = _BITS_PER_PARAMETER * num_parameters / 1e6
        work = samples * self.compute[ids] * (num_parameters / reference)
        out: FloatArray = work + self.latency[ids] + megabits / self.upload[ids]
        return out


# The ranges of a client's values (medians and trace rows alike) that keep every round time finite:
# at the extremes, with a spread of sigma = 10 (a factor of e^80 at eight standard deviations), a
# round of 10^18 samples of a 10^12-parameter model lasts below 1e80 seconds, far from float's 1e308
# (a bandwidth of 1e-320 made them infinite). One bit a second to a petabit a second; a picosecond
# to 11 days a sample; a latency below 11 days each way.
COMPUTE_RANGE = Interval(float, 1e-12, 1e6, closed="both")
BANDWIDTH_RANGE = Interval(float, 1e-6, 1e9, closed="both")
LATENCY_RANGE = Interval(float, 0, 1e6, closed="both")


@dataclass(frozen=True, kw_only=True)
class SystemModel:
    """The clients' speeds and links, and the round deadline (the ``[system]`` table of a config)."""

    distribution: Literal["lognormal", "loguniform", "constant"] = "lognormal"
    compute: float = 0.005
    compute_sigma: float = 0.5
    upload: float = 10.0
    download: float = 50.0
    bandwidth_sigma: float = 0.5
    latency: float = 0.05
    reference_parameters: float = 1e5
    deadline: float | None = None
    trace: str | None = None

    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        "distribution": Options(SYSTEM_DISTRIBUTIONS),
        "compute": COMPUTE_RANGE,
        "compute_sigma": Interval(float, 0, 10, closed="both"),
        "upload": BANDWIDTH_RANGE,
        "download": BANDWIDTH_RANGE,
        "bandwidth_sigma": Interval(float, 0, 10, closed="both"),
        "latency": LATENCY_RANGE,
        "reference_parameters": Interval(float, 1, math.inf, closed="left"),
        "deadline": NoneOr(Interval(float, 0, math.inf, closed="neither")),
        "trace": NoneOr(Text("a non-empty path (one line, no control characters)", single_line=True)),
    }

    def __post_init__(self) -> None:
        constraints = self._parameter_constraints
        check_params("SystemModel", {name: getattr(self, name) for name in constraints}, constraints)

    def clients(self, num_clients: int, seed: int) -> ClientSystems:
        """The ``num_clients`` clients' systems for the run seed ``seed`` (the trace's, if one is given)."""
        if self.trace is not None:
            compute, upload, download = load_system_trace(self.trace, num_clients)
            return ClientSystems(compute, upload, download, np.full(num_clients, self.latency))
        rng = stream_rng(seed, Stream.SYSTEM)
        compute = self.compute * self._spread(rng, num_clients, self.compute_sigma)
        upload = self.upload * self._spread(rng, num_clients, self.bandwidth_sigma)
        download = self.download * self._spread(rng, num_clients, self.bandwidth_sigma)
        return ClientSystems(compute, upload, download, np.full(num_clients, self.latency))

    def _spread(self, rng: np.random.Generator, size: int, sigma: float) -> FloatArray:
        if self.distribution == "lognormal":
            out: FloatArray = np.exp(sigma * rng.standard_normal(size))
        elif self.distribution == "loguniform":
            out = np.exp(sigma * rng.uniform(-1.0, 1.0, size))
        else:
            out = np.ones(size)
        return out


def _trace_error(constraint: str, value: object, source: Path) -> FedsampleError:
    shown = repr(value)[:80]
    return FedsampleError(
        f"The '{_TRACE_NAME}' parameter must name {constraint}. Got {shown} in {str(source)!r} instead.",
        parameter=_TRACE_NAME,
    )


def _rows(source: Path) -> list[tuple[object, ...]]:
    """The trace's rows as ``(client, compute, upload, download)`` tuples of unchecked values."""
    with open_input(source) as handle:  # a FIFO without a writer reads as empty instead of hanging
        data = handle.read(_MAX_TRACE_BYTES + 1)
    if len(data) > _MAX_TRACE_BYTES:
        raise _trace_error("a trace file of at most 1 GiB", f"{source} (larger)", source)
    text = data.decode("utf-8-sig")  # a byte-order mark (a spreadsheet's export) is not part of the header
    if source.suffix.lower() == ".json":
        data = json.loads(text)
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            raise _trace_error("a JSON array of objects with the keys client, compute, upload, download", data, source)
        rows = []
        for item in data:
            if set(item) != set(TRACE_COLUMNS):
                raise _trace_error("objects with exactly the keys client, compute, upload, download", item, source)
            rows.append(tuple(item[key] for key in TRACE_COLUMNS))
        return rows
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None or [h.strip() for h in header] != list(TRACE_COLUMNS):
        raise _trace_error("a CSV file starting with the header 'client,compute,upload,download'", header, source)
    out: list[tuple[object, ...]] = []
    for row in reader:
        if len(row) != len(TRACE_COLUMNS):
            raise _trace_error("four values per row", ",".join(row), source)
        try:
            out.append((int(row[0]), *(float(v) for v in row[1:])))
        except ValueError:
            raise _trace_error("an integer client id and three numbers per row", ",".join(row), source) from None
    return out


def load_system_trace(path: str | Path, num_clients: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Each client's compute cost (s/sample), upload and download bandwidths (Mbit/s), from a trace file.

    The file is CSV (header ``client,compute,upload,download``) or JSON (a ``.json`` file holding an
    array of objects with those keys). Every client ``0 .. num_clients - 1`` must appear exactly
    once; the values must be finite and positive. Nothing is unpickled or evaluated.
    """
    source = Path(path)
    try:
        rows = _rows(source)
    except OSError as error:
        raise _trace_error("a readable file", f"{source} ({error.strerror})", source) from None
    except FedsampleError:  # a ValueError too, already about the trace
        raise
    # ValueError: not UTF-8, not JSON, or an int of more than 4300 digits; RecursionError: nested too deep.
    except (ValueError, csv.Error, RecursionError) as error:
        raise _trace_error("a UTF-8 CSV or JSON text file", f"{type(error).__name__}: {error}", source) from None
    clients = np.full(num_clients, False)
    values = np.zeros((num_clients, 3))
    for row in rows:
        client = row[0]
        if not isinstance(client, int) or isinstance(client, bool) or not 0 <= client < num_clients:
            raise _trace_error(f"client ids in [0, {num_clients})", client, source)
        if clients[client]:
            raise _trace_error("each client once", client, source)
        numbers = row[1:]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in numbers):
            raise _trace_error("numbers for compute, upload and download", numbers, source)
        ranges = (COMPUTE_RANGE, BANDWIDTH_RANGE, BANDWIDTH_RANGE)
        if not all(bound.is_satisfied_by(v) for bound, v in zip(ranges, numbers, strict=True)):
            rule = "compute values in [1e-12, 1e6] s/sample and upload and download in [1e-6, 1e9] Mbit/s"
            raise _trace_error(rule, numbers, source)
        clients[client] = True
        values[client] = [float(v) for v in numbers]  # type: ignore[arg-type]
    if not clients.all():
        missing = int(np.flatnonzero(~clients)[0])
        found = f"rows for {int(clients.sum())} clients, none for client {missing}"
        raise _trace_error(f"a row for every client 0 .. {num_clients - 1}", found, source)
    return values[:, 0].copy(), values[:, 1].copy(), values[:, 2].copy()


SYSTEM = declared(SystemModel, "system")
"""The ``[system]`` table of a config: :class:`SystemModel`'s parameters, declared once."""
