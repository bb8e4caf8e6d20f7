"""`python -m optrace` runs the same CLI as the `optrace` console script."""

from optrace.entry import main

if __name__ == "__main__":
    main()
