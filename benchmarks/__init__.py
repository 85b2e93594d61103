"""Side-by-side benchmarks: each reports a ratio against the tool a user would
use instead, measured in one run. `make bench` runs them all; one alone with
`python -m benchmarks NAME` (NAME as in bench_NAME.py)."""
