"""optrace.rules: planning rules (rules/base.py: the framework; rules/registry.py: which run, in order)."""
