"""User-level differential privacy of a sampler: each client's epsilon, accounted by dp-accounting.

The model (docs/privacy.md): a trusted server clips each update to norm ``C``, adds
``N(0, (z C s)^2 I)`` once per round to the weighted sum ``sum_i w_i(S_t) clip_C(Delta_i)``, and the
sampler's randomness is secret. :func:`exposure_of` reads what a sampler's design exposes of each
client (or refuses a design that depends on the clients' data, with the reason), :func:`noise_std`
is the noise the mechanism must add, and :func:`privacy_cost`, :func:`rounds_for_budget` and
:func:`noise_for_budget` ask dp-accounting (the ``privacy`` extra) for each client's epsilon.

FedSampling's local DP of its size query (randomized response) is re-exported here from
:mod:`fedsample.samplers.schemes.fedsampling_ldp`: :class:`PrivacyReport`, :func:`epsilon_of`,
:func:`randomized_response_matrix`, :func:`response_probability`.
"""

from fedsample.privacy.accountant import (
    ACCOUNTANTS,
    MAX_ROUNDS,
    PrivacyCost,
    noise_for_budget,
    privacy_cost,
    rounds_for_budget,
)
from fedsample.privacy.exposure import (
    ADD_REMOVE,
    Exposure,
    design_exposure,
    design_refusal,
    noise_std,
)
from fedsample.privacy.refusals import exposure_of, refusal
from fedsample.samplers.schemes.fedsampling_ldp import (
    PrivacyReport,
    epsilon_of,
    randomized_response_matrix,
    response_probability,
)

__all__ = [
    "ACCOUNTANTS",
    "ADD_REMOVE",
    "MAX_ROUNDS",
    "Exposure",
    "PrivacyCost",
    "PrivacyReport",
    "design_exposure",
    "design_refusal",
    "epsilon_of",
    "exposure_of",
    "noise_for_budget",
    "noise_std",
    "privacy_cost",
    "randomized_response_matrix",
    "refusal",
    "response_probability",
    "rounds_for_budget",
]
