"""The samplers that draw from a fixed scheme: full participation, md, uniform, Poisson, binomial,
Bernoulli, systematic, clustered sampling and FedSampling's data-level scheme (each registers itself
in :mod:`fedsample.samplers._registry`)."""
