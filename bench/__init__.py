"""`make bench`: workerless's benchmark suite and cost model (see bench/run.py). Never run by `make test`."""
