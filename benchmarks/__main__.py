"""``python -m benchmarks``: run the agent-run benchmark and print its table."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from benchmarks import peers as peer_bench
from benchmarks.agent_run import (
    DOCS_PATH,
    BenchmarkFailure,
    environment,
    format_markdown,
    format_table,
    run_agent_benchmark,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--steps", type=int, default=500, help="agent steps to run and commit (default 500)")
    parser.add_argument("--documents", type=int, default=50, help="documents in the state (default 50)")
    parser.add_argument("--doc-size", type=int, default=20_000, help="characters per document (default 20000)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument(
        "--out", type=Path, help="also write the report to this file: JSON if it ends in .json, else Markdown"
    )
    parser.add_argument("--write-docs", action="store_true", help="also write the report to docs/benchmarks.md")
    parser.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run the same workload through LangGraph's SqliteSaver and InMemorySaver and git "
        "(default: on when langgraph-checkpoint and langgraph-checkpoint-sqlite are installed)",
    )
    args = parser.parse_args(argv)
    command = shlex.join(["python", "-m", "benchmarks", *(sys.argv[1:] if argv is None else argv)])

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        report = run_agent_benchmark(
            args.steps, documents=args.documents, doc_size=args.doc_size, seed=args.seed, progress=progress
        )
    except BenchmarkFailure as exc:
        print(f"benchmark failed, no figures reported: {exc}", file=sys.stderr)
        return 1
    env = environment()
    print(format_table(report))
    peers = None
    if args.peers is not False:
        if peer_bench.peers_available():
            try:
                peers = peer_bench.run_peers(
                    args.steps, documents=args.documents, doc_size=args.doc_size, seed=args.seed, progress=progress
                )
            except BenchmarkFailure as exc:
                print(f"peer benchmark failed, no peer figures reported: {exc}", file=sys.stderr)
                return 1
            print()
            print(peer_bench.format_peers_table(report, peers))
        else:
            print(peer_bench.INSTALL_HINT)
    peer_lines = peer_bench.format_peers_markdown(report, peers) if peers else None
    markdown = format_markdown(report, env, command, peer_lines)
    if args.out:
        if args.out.suffix == ".json":
            figures = {**report.as_dict(), "environment": env, "command": command}
            if peers:
                figures["peers"] = peers.as_dict()
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
