"""The samplers that learn an unbiased distribution from feedback: the bandits (uniform-is, mabs, vrb,
avare), OSMD and adaptive OSMD, optimal sampling; with the distributions and the simplex projection
they share (each registers itself in :mod:`fedsample.samplers._registry`)."""
