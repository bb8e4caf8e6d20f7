"""optrace: trace-point instrumentation for Ascend operators."""

__version__ = "0.1.0"
