"""The selectors: samplers that pick clients by a rule over what they reported (Oort, Power-of-Choice,
DivFL, FedCor, HiCS-FL, AFL, DELTA, FedCBS, FLSim's and the loss and round-robin rules of
:mod:`fedsample.samplers.selectors.rules`), each registered in :mod:`fedsample.samplers._registry`."""
