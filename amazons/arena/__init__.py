"""`python -m amazons.arena A B --games N`: a match between two players, with Elo intervals.

`--board NAME|START` plays every game on that board (`standard10`, `openspiel6`, a start position
string; Botzone's 8x8 `botzone8` by default): e.g.
`python -m amazons.arena classical mcts-rollout --board standard10 --games 4`.

The command line only; the matches themselves (`run_arena`, `ArenaWorkers`, `elo_interval`,
`ArenaResult`) are the library's, `amazons.matches.arena`, which never imports this package.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from amazons.boards import BOARDS, DEFAULT_BOARD
from amazons.core.backends import COMPUTED_PRECISIONS
from amazons.matches.arena import ArenaError, ArenaWorkers, network_servers, run_arena
from amazons.players.factory import (
    DEFAULT_SIMULATIONS,
    player_factories,
    player_names,
    split_spec,
)
from amazons.players.records import write_records
from amazons.serving.server import InferenceError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Command line: `python -m amazons.arena A B --games N [--simulations N] ...`; exit status 0,
    1 when a worker or server fails, 2 on bad arguments, 130 after Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m amazons.arena",
        description="Play a match between two players and report wins, win rate and Elo. With more "
                    "than one process, network players (mcts-net, policy-net) are served: one "
                    "inference server per network batches the leaves of every worker process.")
    parser.add_argument("player_a", help=f"player spec, one of: {', '.join(player_names())}")
    parser.add_argument("player_b", help="player spec")
    parser.add_argument("--games", type=int, default=20, help="games to play (default 20)")
    parser.add_argument("--board", default=DEFAULT_BOARD, metavar="NAME|START",
                        help=f"the board of every game: one of {', '.join(BOARDS)}, or a start "
                             f"position string such as '2B2B2/8/B6B/8/8/W6W/8/2W2W2 b' "
                             f"(default {DEFAULT_BOARD})")
    parser.add_argument("--simulations", type=int, default=None,
                        help=f"MCTS simulations per move (default {DEFAULT_SIMULATIONS})")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="MCTS seconds per move instead of --simulations")
    parser.add_argument("--processes", type=int, default=None,
                        help="worker processes (default: CPUs)")
    parser.add_argument("--seed", type=int, default=0, help="seed of openings and players")
    parser.add_argument("--opening-plies", type=int, default=4,
                        help="random opening plies (default 4)")
    parser.add_argument("--search-a", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SearchConfig override for A's search, e.g. solver=false "
                             "(repeatable)")
    parser.add_argument("--search-b", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SearchConfig override for B's search (repeatable)")
    parser.add_argument("--device", default="auto",
                        help="where network models run: auto (a GPU when there is one), cpu, "
                             "cuda, ...")
    parser.add_argument("--precision", default="auto", choices=("auto", *COMPUTED_PRECISIONS),
                        help="how network models compute (auto: bf16 on a GPU that has it, fp32 "
                             "on a CPU)")
    parser.add_argument("--no-server", action="store_true",
                        help="load network models in every worker process instead of serving "
                             "them")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the result as JSON here")
    parser.add_argument("--record", type=Path, default=None,
                        help="also write every game to this file (game record format, "
                             "docs/play.md)")
    args = parser.parse_args(argv)
    try:
        overrides = []
        for texts in (args.search_a, args.search_b):
            pairs = [text.partition("=") for text in texts]
            bad = [text for text, (_, equals, _) in zip(texts, pairs, strict=True) if not equals]
            if bad:
                raise ValueError(f"bad search override {bad[0]!r}: expected FIELD=VALUE, "
                                 f"e.g. solver=false")
            overrides.append(tuple((name.strip(), value.strip()) for name, _, value in pairs))
        processes = min(args.games, args.processes or os.cpu_count() or 1) if args.games >= 1 else 1
        specs = [args.player_a, args.player_b]
        servers = ({} if args.no_server or processes < 2
                   else network_servers(specs, args.device, args.precision, board=args.board))
        if servers:
            humans = [spec for spec in specs if split_spec(spec)[0] == "human"]
            if humans:
                raise ValueError("a human plays in this process: pass --processes 1")
        arena_args = (args.player_a, args.player_b, args.games, args.simulations, processes,
                      args.seed, args.opening_plies, args.time_budget, overrides[0], overrides[1])
        if servers:
            with ArenaWorkers(processes, servers, factories=player_factories(
                    sorted({split_spec(spec)[0] for spec in specs}))) as workers:
                result = run_arena(*arena_args, workers=workers,
                                   served={spec: spec for spec in servers},
                                   device=args.device, precision=args.precision, board=args.board)
        else:
            result = run_arena(*arena_args, device=args.device, precision=args.precision,
                               board=args.board)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    except (ArenaError, InferenceError) as error:
        print(f"arena: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("arena: stopped by Ctrl-C; no result written", file=sys.stderr)
        return 128 + signal.SIGINT
    print(result.summary())
    try:
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        if args.record is not None:
            write_records(args.record, result.records)
            print(f"{len(result.records)} games written to {args.record}")
    except OSError as error:
        print(f"arena: cannot write the results: {error}", file=sys.stderr)
        return 1
    return 0

