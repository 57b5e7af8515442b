"""``python -m benchmarks``: run the workloads and print their tables.

Every workload by default; ``--workload NAME`` (repeatable) picks some, ``--quick``
runs them at a small scale, ``--write-docs`` rewrites docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from benchmarks import peers as peer_bench
from benchmarks.measure import FULL, QUICK, BenchmarkFailure, environment, to_json
from benchmarks.suite import (
    DOCS_PATH,
    SCALES,
    WORKLOADS,
    child_main,
    page,
    run_workload,
    summary_table,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--workload", action="append", choices=list(WORKLOADS), metavar="NAME",
                        help=f"run this workload (repeatable; default: all of {', '.join(WORKLOADS)})")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a small scale: every code path in seconds")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run LangGraph's SqliteSaver and InMemorySaver and git where a workload compares them "
        "(default: on when langgraph-checkpoint and langgraph-checkpoint-sqlite are installed)",
    )
    parser.add_argument("--out", type=Path, help="also write the report to this file: JSON if it ends in .json, else Markdown")
    parser.add_argument("--write-docs", action="store_true",
                        help="also write the report to docs/benchmarks.md (every workload, full scale)")  # fmt: skip
    parser.add_argument("--part", nargs=2, metavar=("WORKLOAD", "PART"), help=argparse.SUPPRESS)
    parser.add_argument("--scale", choices=list(SCALES), default=FULL.name, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:  # a child process of the run below: one part of one workload
        return child_main(*args.part, args.scale, args.seed, args.result)
    if args.write_docs and (args.quick or args.workload):
        parser.error("--write-docs writes every workload at full scale: drop --quick and --workload")
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])
    scale = QUICK if args.quick else FULL
    peers = args.peers
    if peers is None:
        peers = peer_bench.peers_available()
        if not peers:
            print(peer_bench.INSTALL_HINT, file=sys.stderr)

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    sections = []
    for name in args.workload or list(WORKLOADS):
        try:
            section = run_workload(name, scale, seed=args.seed, peers=peers, say=progress)
        except BenchmarkFailure as exc:
            print(f"benchmark failed, no figures reported: {exc}", file=sys.stderr)
            return 1
        print(section.text(), end="\n\n", flush=True)
        sections.append(section)
    print(summary_table(sections).text())
    env = environment()
    markdown = page(sections, env, command, scale)
    if args.out:
        if args.out.suffix == ".json":
            figures = {"scale": scale.name, "environment": env, "command": command,
                       "sections": [to_json(s) for s in sections]}  # fmt: skip
            args.out.write_text(json.dumps(figures, indent=2) + "\n")
        else:
            args.out.write_text(markdown)
        print(f"wrote {args.out}", file=sys.stderr)
    if args.write_docs:
        DOCS_PATH.write_text(markdown)
        print(f"wrote {DOCS_PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
