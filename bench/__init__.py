"""Load generator and benchmarks; results go to docs/benchmarks.md with the command."""
