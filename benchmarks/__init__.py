"""snapvc's benchmarks: measured runs of realistic workloads, apart from the tests.

Run them from the repository's root folder::

    python -m benchmarks                          # every workload (about 10 minutes)
    python -m benchmarks --workload wide-map      # one of them (repeatable)
    python -m benchmarks --quick                  # all of them, small: a smoke run
    python -m benchmarks --write-docs             # also rewrites docs/benchmarks.md

The workloads, one module each: ``agent_run`` (500 agent steps, side by side with
LangGraph's savers and git, ``peers``), ``growth`` (stored bytes from 100 to 2,000
steps, snapvc and each peer), ``large_state`` (220 MB, next to this machine's hashing,
compression and JSON speeds, ``limits``), ``wide_map`` (100,000 keys), ``long_list``
(1,000,000 elements), ``deep_history`` (10,000 commits) and ``branching`` (20 forks).
``workload`` generates their data from a seed; ``measure`` holds what they share;
``suite`` runs each part of a workload in a process of its own and assembles the page.

Every workload checks that what it reads back equals what it committed and raises
``BenchmarkFailure`` otherwise. Timings are never asserted anywhere:
``tests/test_benchmarks_smoke.py`` runs every workload at the quick scale and checks
what it reports and that it read back what it wrote.
"""
