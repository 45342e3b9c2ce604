"""ctxdbench: the measurements of tools/bench/bench.py, one module per group
of figures (see tools/bench/README.md); bench.py is its command line."""
