"""optrace.engine"""
