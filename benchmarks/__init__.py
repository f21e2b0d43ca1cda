"""gluonkit's benchmarks, run from a clone's root as modules: ``python -m benchmarks.throughput``."""
