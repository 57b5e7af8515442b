"""snapvc's benchmarks: measured runs of realistic agent workloads, apart from the tests.

Run them from the repository's root folder::

    python -m benchmarks                 # 500 steps; prints the table
    python -m benchmarks --steps 2000    # a longer run
    python -m benchmarks --write-docs    # also rewrites docs/benchmarks.md

``workload`` builds the simulated agent's state; ``agent_run`` commits it step by step
and measures size, commit, checkout, lazy read and log times, and memory. Timings are
never asserted anywhere: ``tests/test_benchmarks_smoke.py`` only checks that a short run
completes, reports every figure and reads back what it wrote.
"""
