"""optrace.pipeline: the coordinators — plan, apply / strip, check, gates, the multi-operator run."""
