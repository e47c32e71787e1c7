"""Sampling designs: the few random mechanisms that every sampler reduces to.

A design says how a round's selection is drawn and which aggregation weight each drawn client
gets. Samplers build designs from their state; :mod:`fedsample.stats` computes exact moments from
designs, so a new sampler that reuses a design gets its statistics for free.

* :class:`FullDesign`: every client, a fixed weight each.
* :class:`RowDesign`: independent draws, one per row of a row-stochastic matrix (MD sampling is
  one row ``p`` drawn ``m`` times; clustered sampling is ``m`` different rows). A client gets
  ``draw_weights[i]`` per time it is drawn.
* :class:`FixedSizeDesign`: ``m`` distinct clients uniformly without replacement.
* :class:`BernoulliDesign`: independent inclusions with probabilities ``q_i`` (Poisson-binomial,
  binomial and optimal sampling of paper 003, App. A.5, A.6 and A.8).
* :class:`SystematicDesign`: ``m`` distinct clients with prescribed inclusion probabilities
  ``pi_i`` (systematic sampling over a fixed order), Horvitz-Thompson weights.

Every ``draw`` costs time in the number of selected clients (and, for :class:`RowDesign`, the
logarithm of the row lengths), never in ``n``: the set-up work is done once, at construction.
"""

from fedsample.designs.base import MAX_DRAWS, Design
from fedsample.designs.data_level import DataLevelDesign
from fedsample.designs.inclusion import BernoulliDesign, SystematicDesign
from fedsample.designs.normalized import NormalizedDesign
from fedsample.designs.rows import RowDesign
from fedsample.designs.successive import SuccessiveDesign
from fedsample.designs.uniform import FixedSizeDesign, FullDesign

__all__ = [
    "MAX_DRAWS",
    "BernoulliDesign",
    "DataLevelDesign",
    "Design",
    "FixedSizeDesign",
    "FullDesign",
    "NormalizedDesign",
    "RowDesign",
    "SuccessiveDesign",
    "SystematicDesign",
]
