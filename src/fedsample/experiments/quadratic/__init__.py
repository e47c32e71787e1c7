"""Paper 003's quadratic experiment: the closed form (:mod:`.theory`) and the experiment run (:mod:`.run`)."""
