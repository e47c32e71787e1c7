"""The run directory: what it holds (:mod:`~fedsample.experiments.rundir.directory`), its manifest, its lock,
the inputs a run was computed from and what ``--resume`` can take up again."""
