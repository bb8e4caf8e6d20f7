"""optrace.codemods"""
