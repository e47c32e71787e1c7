"""A Flower app that selects clients with a fedsample sampler."""
