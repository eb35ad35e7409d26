"""``benchsite-agent``: the agent's command line (``python -m agents.cli``); ``main`` is the
console script.

One module a job: ``parser`` (every subcommand's arguments), ``bench`` (load-test any
OpenAI-compatible server on its own; ``vllm_flags`` reads ``vllm bench serve``'s flags as its
own, ``sim_clock`` reports a simulator's figures in its modelled time), ``predict`` (the
same benchmark on the simulator offline, in simulated time), ``engine`` (``serve-sim``: the
simulator in the foreground; ``engine-up``: an engine from a JSON description until
Ctrl-C), ``job`` (``run``: a whole job unattended, reporting to the site or a results
folder; ``flush``: deliver what an earlier ``run`` could not), ``usage`` (exit codes and the
usage error every subcommand shares).
"""

from __future__ import annotations

from agents.cli.bench import run_bench_command
from agents.cli.engine import run_engine_up, run_serve_sim
from agents.cli.parser import build_parser
from agents.cli.predict import run_predict_command
from agents.cli.run_and_flush import run_flush_command, run_job_command
from agents.cli.usage import EXIT_USAGE

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        return run_job_command(args)
    if args.command == "flush":
        return run_flush_command(args)
    if args.command == "bench":
        return run_bench_command(args)
    if args.command == "predict":
        return run_predict_command(args)
    if args.command == "serve-sim":
        return run_serve_sim(args)
    if args.command == "engine-up":
        return run_engine_up(args)
    return EXIT_USAGE  # pragma: no cover - argparse requires a command
