"""The numbers of paper 003's quadratic experiment (Sec. 4.1, App. D, App. E.1) and the paper's claims
checked on them: :class:`QuadraticResult` (written to ``quadratic.json`` by
:func:`~fedsample.experiments.quadratic.run.run_quadratic_experiment`) and :func:`check_claims`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedsample._arrays import FloatArray
from fedsample.errors import FedsampleError
from fedsample.serialization import decode_floats

__all__ = ["SCHEMES", "SETTINGS", "Z_LIMIT", "Claim", "Grid", "QuadraticResult", "check_claims"]

SCHEMES = ("full", "md", "uniform")
SETTINGS = ("iid", "non-iid")
Z_LIMIT = 4.0  # a simulated mean "matches" its closed form within this many standard errors


@dataclass(frozen=True)
class Claim:
    """A property the paper states, checked on the results: its wording, whether it holds, the numbers."""

    name: str
    holds: bool
    detail: str


Grid = dict[str, dict[str, FloatArray]]  # [setting][scheme] -> (len(r_values), rounds + 1)


def _z(mean: FloatArray, sem: FloatArray, theory: FloatArray) -> FloatArray:
    """``(mean - theory) / sem``; 0 where a deterministic outcome (``sem = 0``) equals its closed form."""
    diff = mean - theory
    exact = np.abs(diff) <= 1e-9 * np.maximum(1.0, np.abs(theory))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sem > 0, diff / np.where(sem > 0, sem, 1.0), np.where(exact, 0.0, np.inf))
    return np.asarray(z, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class QuadraticResult:
    """The quadratic experiment's numbers: closed form and simulated mean and standard error per point.

    ``theory[setting][scheme]``, ``simulated_mean`` and ``simulated_sem`` are ``(len(r_values),
    rounds + 1)`` arrays of ``E||theta^t - theta*||^2`` for ``t = 0..rounds`` (column 0 is the
    initial distance). ``growth_factor[scheme]`` is ``E[(1 - eta_g phi sum_i w_i)^2]`` per ``r``,
    the per-round factor of the squared distance (above 1 it diverges). ``claims`` are the paper's
    statements checked on these numbers.
    """

    num_clients: int
    num_sampled: int
    dim: int
    local_lr: float
    local_steps: int
    server_lr: float
    rounds: int
    simulations: int
    seed: int
    r_values: FloatArray
    theory: Grid
    simulated_mean: Grid
    simulated_sem: Grid
    growth_factor: dict[str, FloatArray]
    claims: tuple[Claim, ...]

    def __post_init__(self) -> None:
        for key, kind in _CONFIG.items():  # plain ints and floats, however they were given (numpy scalars, JSON)
            object.__setattr__(self, key, kind(getattr(self, key)))

    def z_scores(self, setting: str, scheme: str) -> FloatArray:
        """``(simulated mean - closed form) / standard error`` for rounds ``1..rounds``, shape ``(len(r), rounds)``."""
        return _z(
            self.simulated_mean[setting][scheme][:, 1:],
            self.simulated_sem[setting][scheme][:, 1:],
            self.theory[setting][scheme][:, 1:],
        )

    @property
    def max_abs_z(self) -> float:
        return max(float(np.max(np.abs(self.z_scores(s, k)))) for s in SETTINGS for k in SCHEMES)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (floats keep every digit); :meth:`from_dict` inverts it."""
        grids = {key: getattr(self, key) for key in _GRIDS}
        return {
            "experiment": "quadratic (paper 003, Sec. 4.1, App. D and E.1)",
            "config": {key: getattr(self, key) for key in _CONFIG},
            "r_values": self.r_values.tolist(),
            **{key: {s: {k: grid[s][k].tolist() for k in SCHEMES} for s in SETTINGS} for key, grid in grids.items()},
            "growth_factor": {k: self.growth_factor[k].tolist() for k in SCHEMES},
            "max_abs_z": self.max_abs_z,
            "claims": [{"name": c.name, "holds": c.holds, "detail": c.detail} for c in self.claims],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QuadraticResult:
        """Rebuild a result from :meth:`to_dict`'s output (for example
        :func:`~fedsample.serialization.load_json` of ``quadratic.json``; non-finite floats may be encoded)."""
        data = decode_floats(data)
        try:
            config = {key: data["config"][key] for key in _CONFIG}
            grids: dict[str, Any] = {
                key: {s: {k: np.asarray(data[key][s][k], dtype=np.float64) for k in SCHEMES} for s in SETTINGS}
                for key in _GRIDS
            }
            return cls(
                **config,
                **grids,
                r_values=np.asarray(data["r_values"], dtype=np.float64),
                growth_factor={k: np.asarray(data["growth_factor"][k], dtype=np.float64) for k in SCHEMES},
                claims=tuple(Claim(str(c["name"]), bool(c["holds"]), str(c["detail"])) for c in data["claims"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise FedsampleError(
                "The 'data' parameter of QuadraticResult.from_dict must be the output of QuadraticResult.to_dict. "
                f"Got a mapping with a missing or malformed entry ({type(exc).__name__}: {exc}) instead.",
                parameter="data",
            ) from exc


_CONFIG: dict[str, type] = {
    "num_clients": int,
    "num_sampled": int,
    "dim": int,
    "local_lr": float,
    "local_steps": int,
    "server_lr": float,
    "rounds": int,
    "simulations": int,
    "seed": int,
}
_GRIDS = ("theory", "simulated_mean", "simulated_sem")


def check_claims(result: QuadraticResult) -> tuple[Claim, ...]:
    """The paper's statements about Fig. 1 (and Fig. 4 when ``rounds > 1``), on the final round's closed form,
    and the agreement of closed form and simulation."""
    r, theory, growth, num_clients = result.r_values, result.theory, result.growth_factor, result.num_clients
    iid = {k: theory["iid"][k][:, -1] for k in SCHEMES}
    non = {k: theory["non-iid"][k][:, -1] for k in SCHEMES}
    at = np.abs(r - 1.0 / num_clients) < 1e-12
    claims = []
    rel = float(np.max(np.abs(iid["md"] - iid["full"]) / iid["full"]))
    claims.append(Claim("iid: MD equals Full", rel <= 1e-9, f"max relative difference {rel:.1e} over {r.size} r"))
    ratio = iid["uniform"] / iid["md"]
    off = ~at
    worse = bool(np.all(ratio[off] > 1.0 + 1e-9))
    detail = f"Uniform/MD >= {ratio[off].min():.4g} for r != 1/n" if off.any() else "only r = 1/n in the grid"
    if at.any():
        worse = worse and abs(float(ratio[at][0]) - 1.0) <= 1e-9
        detail += f"; Uniform/MD = {float(ratio[at][0]):.12g} at r = 1/n"
    else:
        detail += " (r = 1/n not in the grid)"
    claims.append(Claim("iid: Uniform worse than MD, except a tie at r = 1/n", worse, detail))
    best = np.minimum(non["md"], non["uniform"])
    top = float(np.max(non["full"] / best))
    claims.append(
        Claim(
            "non-iid: Full is the best scheme for every r", top <= 1.0 + 1e-12, f"max Full/min(MD, Uniform) {top:.4g}"
        )
    )
    if at.any():
        i = int(np.flatnonzero(at)[0])
        md_worse = non["md"] > non["uniform"]
        lo = hi = i
        while lo > 0 and md_worse[lo - 1]:
            lo -= 1
        while hi < r.size - 1 and md_worse[hi + 1]:
            hi += 1
        span = f"; MD worse for r in [{r[lo]:g}, {r[hi]:g}]" if md_worse[i] else ""
        claims.append(
            Claim(
                "non-iid: MD worse than Uniform near r = 1/n",
                bool(md_worse[i]),
                f"at r = 1/n MD {non['md'][i]:.5g} vs Uniform {non['uniform'][i]:.5g}{span}",
            )
        )
    if r[-1] >= 0.5:
        better = non["md"] < non["uniform"]
        k = r.size
        while k > 0 and better[k - 1]:
            k -= 1
        span = f"MD better for every r >= {r[k]:g} in the grid; " if k < r.size else ""
        claims.append(
            Claim(
                "non-iid: MD better than Uniform for large r",
                bool(better[-1]),
                f"{span}at r = {r[-1]:g} MD {non['md'][-1]:.5g} vs Uniform {non['uniform'][-1]:.5g}",
            )
        )
    worst, where = -1.0, ""
    for setting in SETTINGS:
        for scheme in SCHEMES:
            z = np.abs(result.z_scores(setting, scheme))
            ri, ti = np.unravel_index(int(np.argmax(z)), z.shape)
            if z[ri, ti] > worst:
                worst, where = float(z[ri, ti]), f"{setting}, {scheme}, r = {r[ri]:g}"
                where += f", round {ti + 1}" if result.rounds > 1 else ""
    count = len(SETTINGS) * len(SCHEMES) * r.size * result.rounds
    claims.append(
        Claim(
            f"simulation matches the closed form (every z within ±{Z_LIMIT:g})",
            worst <= Z_LIMIT,
            f"max abs(z) = {worst:.2f} ({where}) over {count} comparisons",
        )
    )
    if result.rounds > 1:
        md, uniform = float(growth["md"][-1]), float(growth["uniform"][-1])
        claims.append(
            Claim(
                f"MD converges while Uniform diverges at r = {r[-1]:g}",
                md < 1.0 < uniform,
                f"per-round factor E[(1 - eta_g phi W)^2]: MD {md:.4g}, Uniform {uniform:.4g}",
            )
        )
    return tuple(claims)
