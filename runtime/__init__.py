"""optrace.runtime"""
