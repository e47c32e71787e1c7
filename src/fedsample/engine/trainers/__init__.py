"""Local training of a round's clients: one trainer per execution path, chosen once per run."""
