"""Samplers over populations of up to ``10^8`` clients and more, given as sizes in a memory-mapped file.

The :class:`Population` (sizes ``n_i``, read-only, and their total ``M``; see
:mod:`fedsample.samplers.population.sizes`) is the federation. Three samplers draw from it with
importances ``p_i = n_i / M``, each keeping at most a few bytes per client after a one-time set-up
and doing ``O(m log n)`` work per draw:

* :class:`PopulationMDSampler`: MD sampling, ``m`` i.i.d. draws with ``P(i) = p_i``, ``w_i =
  count_i / m`` (000, eq. 4). Set-up: the cumulative sizes (8 bytes per client).
* :class:`PopulationUniformSampler`: ``m`` distinct clients uniformly, ``w_i = (n/m) p_i``
  (003, eq. 6). No set-up.
* :class:`PopulationClusteredSampler`: clustered sampling by sample size (000, Alg. 1). Set-up:
  the clients' order by decreasing size, from a counting sort on integer sizes (4 bytes per client
  below ``2**31`` clients), and one entry per distinct size.

Each ``sample`` takes an optional availability model (for example
:class:`~fedsample.participation.availability.BernoulliAvailability`; anything with
``available(round, clients)``, the :class:`~fedsample.samplers.row_draws.Availability` protocol)
and a round index, and draws among the clients available in that round only, exactly from the
sampler's distribution conditioned on availability. The MD and clustered states are row designs
(:class:`~fedsample.samplers.row_draws.RowDraws`: MD is one row ``p`` drawn ``m`` times, clustered
sampling ``m`` rows drawn once each), and an unavailable draw is replaced by the one redraw loop the
engine uses too, :func:`~fedsample.samplers.row_draws.redraw_unavailable`, with
``redraws = max_tries - 1`` (doubling batches of candidates: with 70% availability a draw stays
unavailable after 64 tries with probability below ``0.3**64``, with 1% below ``1e-15``). A draw
still unavailable after ``max_tries`` tries raises :class:`~fedsample.FedsampleError` (a round where
too few clients are available fails), except that a clustered row is then scanned exactly (see
:class:`PopulationClusteredSampler`). For uniform sampling the accepted candidates, in order, are a
uniform sequence without replacement from the available clients. Availability is asked only about
candidates, ``O(m)`` per try. The weights are the sampler's own (``1/m`` per draw, or
``(n/m) p_i``): availability changes who is drawn, not the formula.

The samplers follow the :class:`~fedsample.samplers.Sampler` contract: ``init`` also accepts a
:class:`~fedsample.Federation` with size importances, so they run in the engine unchanged; there,
:func:`~fedsample.participation.procedure.select_participants` redraws the MD and clustered samplers'
unavailable entries through the same loop.

>>> import numpy as np
>>> population = Population.from_sizes([100, 250, 500, 150])
>>> sampler = PopulationMDSampler()
>>> state = sampler.init(population, num_sampled=2)
>>> selection = sampler.sample(state, np.random.default_rng(0))
>>> selection.clients.size, float(selection.weights.sum())
(2, 1.0)
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np

from fedsample._arrays import FloatArray, IntArray
from fedsample._validation import Constraint, Interval, Options, check_param, invalid
from fedsample.errors import FedsampleError
from fedsample.federation import Federation
from fedsample.samplers._base import Sampler
from fedsample.samplers._registry import register_sampler
from fedsample.samplers._selection import Selection
from fedsample.samplers._state import MAX_NUM_SAMPLED
from fedsample.samplers.population.sizes import (
    INT64_LIMIT,
    MAX_SCAN,
    SIZE_DTYPES,
    ClusteredPopulationState,
    Population,
    PopulationState,
    as_population,
    cumulative_sizes,
    open_population,
    order_by_size,
    write_sizes_file,
)
from fedsample.samplers.row_draws import MAX_BATCH, Availability, Redrawn, redraw_unavailable
from fedsample.serialization import plain_data

__all__ = [
    "SIZE_DTYPES",
    "ClusteredPopulationState",
    "MDPopulationState",
    "Population",
    "PopulationClusteredSampler",
    "PopulationMDSampler",
    "PopulationUniformSampler",
    "UniformPopulationState",
    "open_population",
    "order_by_size",
    "write_sizes_file",
]


def _check_availability(availability: object, round: object, owner: str) -> None:
    if availability is not None and not isinstance(availability, Availability):
        raise invalid(
            "availability",
            owner,
            "None or an availability model (with available(round, clients))",
            type(availability).__name__,
        )
    check_param("round", owner, round, Interval(int, 0, None, closed="left"))


StateT = TypeVar("StateT")
_PARAMETERS: dict[str, Constraint] = {"max_tries": Interval(int, 1, None, closed="left")}


@dataclass(frozen=True, kw_only=True)
class _PopulationSampler(Sampler[StateT]):
    """Shared hyperparameter: ``max_tries``, the tries of the redraw loop a draw may use (the first draw included)."""

    name: ClassVar[str] = "population"
    max_tries: int = 64
    _parameter_constraints: ClassVar[dict[str, Constraint]] = _PARAMETERS
    _federation_types: ClassVar[tuple[type, ...]] = ()  # a Population or a Federation: as_population checks it

    def design(self, state: Any) -> Any:
        """The state itself: it offers ``num_clients`` and ``draw(rng)`` (the Design protocol)."""
        return state

    def importances(self, state: Any) -> FloatArray:
        """``p_i = n_i / M``, materialised: ``O(n)`` memory, for small populations only."""
        return state.population.importances()  # type: ignore[no-any-return]

    def num_clients(self, state: Any) -> int:
        return int(state.num_clients)

    def sample(
        self, state: StateT, rng: np.random.Generator, *, availability: Availability | None = None, round: int = 0
    ) -> Selection:
        """Draw one round's selection among the clients that ``availability`` says are available in
        ``round`` (every client when it is ``None``)."""
        owner = f"{type(self).__name__}.sample"
        _check_availability(availability, round, owner)
        return self._sample_available(state, rng, availability, round, owner)

    @abstractmethod
    def _sample_available(
        self, state: StateT, rng: np.random.Generator, availability: Availability | None, round: int, owner: str
    ) -> Selection:
        """:meth:`sample` once its arguments are checked (``owner`` names it in errors)."""

    def _rows_among_available(
        self, state: Any, availability: Availability | None, round: int, rng: np.random.Generator
    ) -> Redrawn:
        """One draw per row of ``state.draw_rows``, each redrawn while unavailable (``max_tries`` tries in all)."""
        rows = state.draw_rows
        clients = state.draw_from_rows(rows, rng)
        if availability is None:
            return Redrawn(clients=clients, pending=np.zeros(0, dtype=np.int64), unavailable=0)
        return redraw_unavailable(state, rows, clients, availability, round, rng, redraws=self.max_tries - 1)


# --- MD sampling -------------------------------------------------------------------------------------


@plain_data
@dataclass(frozen=True, eq=False)
class MDPopulationState(PopulationState):
    """MD sampling over a population: ``cumulative[i] = n_0 + ... + n_i`` (int64, 8 bytes per client),
    derived on construction (so a state round-trips through JSON as its population and ``m``)."""

    cumulative: IntArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # As init takes it: a round's m draws are arrays of m entries (a saved 2**62 could not be allocated).
        bound = Interval(int, 1, MAX_NUM_SAMPLED, closed="both")
        check_param("num_sampled", "MDPopulationState", self.num_sampled, bound)
        object.__setattr__(self, "cumulative", cumulative_sizes(self.population))

    @property
    def draw_rows(self) -> IntArray:
        """One row (``p``), drawn ``m`` times."""
        return np.zeros(self.num_sampled, dtype=np.int64)

    def draw_from_rows(self, rows: IntArray, rng: np.random.Generator) -> IntArray:
        """One draw from ``p`` per entry of ``rows`` (all zero)."""
        # Client i owns the integers [C_{i-1}, C_i) of [0, M): exact probability n_i / M.
        units = rng.integers(0, self.population.total, size=rows.size, dtype=np.int64)
        return np.searchsorted(self.cumulative, units, side="right").astype(np.int64)

    def entry_weights(self, clients: IntArray) -> FloatArray:
        return np.full(clients.size, 1.0 / self.num_sampled)

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = self.draw_from_rows(self.draw_rows, rng)
        return clients, self.entry_weights(clients)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class PopulationMDSampler(_PopulationSampler[MDPopulationState]):
    """MD sampling over a :class:`Population`: ``m`` i.i.d. draws, ``P(i) = n_i / M``,
    ``w_i = count_i / m`` (000, eq. 4). Set-up ``O(n)`` (a cumulative sum), draw ``O(m log n)``."""

    name = "population-md"
    # sample(state, rng) draws the rows of the design: the engine may redraw its unavailable entries.
    draws_by_rows: ClassVar[bool] = True

    def init(self, federation: Population | Federation, num_sampled: int) -> MDPopulationState:
        population = as_population(federation, f"{type(self).__name__}.init")
        m = self._check_num_sampled(num_sampled, upper=None)
        return MDPopulationState(population=population, num_sampled=m)

    def _sample_available(
        self,
        state: MDPopulationState,
        rng: np.random.Generator,
        availability: Availability | None,
        round: int,
        owner: str,
    ) -> Selection:
        """``m`` draws among the clients available in ``round``, ``1/m`` each."""
        redrawn = self._rows_among_available(state, availability, round, rng)
        if redrawn.pending.size:
            raise FedsampleError(
                f"The 'availability' parameter of {owner} must leave an available client for every draw of "
                f"round {round}. Got {redrawn.pending.size} of {state.num_sampled} draws with no available "
                f"candidate after {self.max_tries} tries (max_tries) instead.",
                parameter="availability",
            )
        return Selection(clients=redrawn.clients, weights=state.entry_weights(redrawn.clients))


# --- uniform sampling without replacement -----------------------------------------------------------


@plain_data
@dataclass(frozen=True, eq=False)
class UniformPopulationState(PopulationState):
    """Uniform sampling over a population: nothing beyond the sizes (read for the ``m`` drawn)."""

    def __post_init__(self) -> None:
        owner = "UniformPopulationState"
        upper = self.population.num_clients
        check_param("num_sampled", owner, self.num_sampled, Interval(int, 1, upper, closed="both"))

    def weights(self, clients: IntArray) -> FloatArray:
        """``w_i = (n/m) p_i = n n_i / (m M)`` (003, eq. 6)."""
        sizes = np.asarray(self.population.sizes[clients], dtype=np.float64)
        scale = self.population.num_clients / (self.num_sampled * self.population.total)
        return sizes * scale

    def draw(self, rng: np.random.Generator) -> tuple[IntArray, FloatArray]:
        clients = rng.choice(self.num_clients, size=self.num_sampled, replace=False).astype(np.int64)
        return clients, self.weights(clients)


@register_sampler
@dataclass(frozen=True, kw_only=True)
class PopulationUniformSampler(_PopulationSampler[UniformPopulationState]):
    """``m`` distinct clients uniformly without replacement over a :class:`Population`,
    ``w_i = (n/m) p_i`` (003, eq. 6; unbiased). No set-up; a draw is ``O(m log m)``."""

    name = "population-uniform"

    def init(self, federation: Population | Federation, num_sampled: int) -> UniformPopulationState:
        population = as_population(federation, f"{type(self).__name__}.init")
        m = self._check_num_sampled(num_sampled, upper=population.num_clients)
        return UniformPopulationState(population=population, num_sampled=m)

    def _sample_available(
        self,
        state: UniformPopulationState,
        rng: np.random.Generator,
        availability: Availability | None,
        round: int,
        owner: str,
    ) -> Selection:
        """``m`` distinct clients, uniformly among those available in ``round``."""
        if availability is None:
            clients, weights = state.draw(rng)
            return Selection(clients=clients, weights=weights)
        m, n = state.num_sampled, state.num_clients
        chosen = np.zeros(0, dtype=np.int64)
        drawn = 0
        for _ in range(self.max_tries):
            needed = m - chosen.size
            # A stream of uniform candidates; a candidate is accepted when it is available and not
            # accepted before. The accepted ones, in stream order, are a uniform ordered sample
            # without replacement from the available clients (the batch only groups the stream,
            # and its length follows the acceptance rate so far, up to MAX_BATCH * m).
            rate = max(chosen.size, 1) / max(drawn, 1)
            size = min(MAX_BATCH * m, int(2 * needed / rate) + 16)
            drawn += size
            candidates = rng.integers(0, n, size=size, dtype=np.int64)
            _, first = np.unique(candidates, return_index=True)
            candidates = candidates[np.sort(first)]
            candidates = candidates[~np.isin(candidates, chosen)]
            candidates = candidates[availability.available(round, candidates)]
            chosen = np.concatenate([chosen, candidates[:needed]])
            if chosen.size == m:
                return Selection(clients=chosen, weights=state.weights(chosen))
        raise FedsampleError(
            f"The 'availability' parameter of {owner} must leave at least m = {m} clients available in round "
            f"{round}. Got {chosen.size} distinct available clients after {self.max_tries} tries (max_tries) instead.",
            parameter="availability",
        )


# --- clustered sampling by size (Alg. 1 of 000) ------------------------------------------------------


@register_sampler
@dataclass(frozen=True, kw_only=True)
class PopulationClusteredSampler(_PopulationSampler[ClusteredPopulationState]):
    """Clustered sampling by sample size (000, Alg. 1) over a :class:`Population`.

    The same rows as :class:`~fedsample.SizeClusteredSampler` with size importances: clients laid
    out by decreasing size (ties by id), client ``i`` owning ``m n_i`` units of a line of ``m M``
    units cut into ``m`` rows of ``M``; each round draws one client per row, ``w_i = count_i / m``
    (unbiased, eqs. 7-8). Set-up: an ``O(n)`` counting sort; memory: the order (int32 below
    ``2**31`` clients) and one entry per distinct size. Draw: ``O(m log(distinct sizes))``.

    With availability, each row draws among its available clients. A row whose candidates are
    all rejected ``max_tries`` times is scanned (its clients asked once, exact, at most ``2**20``
    of them); a row with no available client at all (a large client alone in its row, say) raises
    with ``empty_rows="raise"`` (default) or contributes no draw with ``"skip"``: the round then
    has fewer than ``m`` entries, still ``1/m`` each, and that row's share of the weight is lost
    (as with the ``"ignore"`` failure policy).
    """

    name = "population-clustered-size"
    # sample(state, rng) draws the rows of the design: the engine may redraw its unavailable entries.
    draws_by_rows: ClassVar[bool] = True
    empty_rows: Literal["raise", "skip"] = "raise"
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {
        **_PARAMETERS,
        "empty_rows": Options(("raise", "skip")),
    }

    def init(self, federation: Population | Federation, num_sampled: int) -> ClusteredPopulationState:
        owner = f"{type(self).__name__}.init"
        population = as_population(federation, owner)
        m = self._check_num_sampled(num_sampled, upper=None)
        if m * population.total >= INT64_LIMIT:
            raise invalid(
                "num_sampled", owner, f"such that m * M stays below 2**62 (M = {population.total})", num_sampled
            )
        return ClusteredPopulationState(population=population, num_sampled=m)

    def _sample_available(
        self,
        state: ClusteredPopulationState,
        rng: np.random.Generator,
        availability: Availability | None,
        round: int,
        owner: str,
    ) -> Selection:
        """One client from each of the ``m`` rows, each among the row's clients available in ``round``."""
        rows = state.draw_rows
        redrawn = self._rows_among_available(state, availability, round, rng)
        clients = redrawn.clients
        if redrawn.pending.size and availability is not None:
            # An exact draw among a row's available clients: switching method after failed tries keeps
            # the law exact, since the scan's draw does not depend on them.
            clients[redrawn.pending] = [state.scan_row(int(row), availability, round, rng) for row in redrawn.pending]
        if np.any(clients == -2):
            k = int(rows[np.argmax(clients == -2)])
            raise FedsampleError(
                f"The 'availability' parameter of {owner} must leave an available client for every draw of "
                f"round {round}. Got row {k} with no available candidate after {self.max_tries} tries (max_tries) "
                f"and too many clients to scan (more than {MAX_SCAN}) instead.",
                parameter="availability",
            )
        empty = clients == -1
        if empty.any() and self.empty_rows == "raise":
            k = int(rows[np.argmax(empty)])
            raise FedsampleError(
                f"The 'availability' parameter of {owner} must leave an available client in every row of "
                f"round {round} (or use empty_rows='skip'). Got row {k} with no available client instead.",
                parameter="availability",
            )
        clients = clients[~empty]
        return Selection(clients=clients, weights=np.full(clients.size, 1.0 / state.num_sampled))
