"""Agreement between two clusterings: the adjusted Rand index (Hubert and Arabie, 1985).

The function lives in :mod:`fedsample._agreement`, which the samplers import without loading the
statistics layer (whose participation report imports the samplers).
"""

from fedsample._agreement import adjusted_rand_index

__all__ = ["adjusted_rand_index"]
