"""optrace.rules: planning rules (see rules/base.py for the framework)."""
