"""optrace.rules"""
