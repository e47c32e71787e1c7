"""Paper 003's quadratic experiment: the closed form (:mod:`.theory`), the results and the paper's claims
checked on them (:mod:`.result`), and the experiment run with its figure and report (:mod:`.run`)."""
