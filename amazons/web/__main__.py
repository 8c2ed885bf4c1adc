"""Command line of the web board.

    python -m amazons.web [--host 127.0.0.1] [--port 8000] [--model default|none|PATH]
                          [--models DIR ...] [--board BOARD] [--time SECONDS]
                          [--games-dir DIR | --no-save]
                          [--run RUN_DIR] [--replay FILE] [--records DIR ...]
                          [--search-threads N] [--torch-threads N] [--log-level LEVEL]

Serves the page and its API with uvicorn until Ctrl-C. Exit status 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

from amazons.boards import DEFAULT_BOARD, NotationError, board_spec
from amazons.web.app import LOOPBACK_HOSTS, WebConfig, create_app
from amazons.web.games import MAX_TIME


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m amazons.web",
        description="A local web board: play the AI, analyse, replay records, watch training.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--model", default="default",
                        help="the AI of a new game unless the page picks another: 'default' "
                             "(the shipped network of the game's board size), 'none' (rollout "
                             "MCTS), an exported .npz model or a .pt checkpoint (torch, the model "
                             "prepared for inference)")
    parser.add_argument("--models", action="append", type=Path, default=[], metavar="DIR",
                        help="a folder whose model files a game may name (repeatable); the page "
                             "may also name 'default', 'none', --model and the --run folder's "
                             "files, and no other path")
    parser.add_argument("--board", default=DEFAULT_BOARD, metavar="BOARD",
                        help="the board of a new game unless the page picks another: botzone8 "
                             "(default), standard10, openspiel6, openspiel8 or a start position "
                             "string such as '3B2B3/10/10/B8B/10/10/W8W/10/10/3W2W3 w'")
    parser.add_argument("--time", type=float, default=1.0, metavar="SECONDS",
                        help="AI seconds per move unless the page picks another (default 1)")
    saving = parser.add_mutually_exclusive_group()
    saving.add_argument("--games-dir", type=Path, default=Path("games"), metavar="DIR",
                        help="folder for the record files of played games (default games/)")
    saving.add_argument("--no-save", action="store_true", help="do not write record files")
    parser.add_argument("--run", default=None, metavar="RUN_DIR",
                        help="open the page on this training run directory (watch view), the "
                             "one run it may watch")
    parser.add_argument("--replay", default=None, metavar="FILE",
                        help="open the page on this record file (replay view)")
    parser.add_argument("--records", action="append", type=Path, default=[], metavar="DIR",
                        help="a folder whose record files the replay view may name "
                             "(repeatable); it may also name --replay and the files inside "
                             "--games-dir, --run and --models, and no other path")
    parser.add_argument("--search-threads", type=int, default=2,
                        help="worker threads for searches (default 2)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch's threads for a .pt model (default 1: games search in "
                             "parallel on the worker threads)")
    parser.add_argument("--log-level", default="info",
                        choices=("critical", "error", "warning", "info", "debug"),
                        help="uvicorn's log level (default info)")
    return parser


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and serve until interrupted; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error(f"--port must be in 1..65535, got {args.port}")
    if not 0 < args.time <= MAX_TIME:
        parser.error(f"--time must be in (0, {MAX_TIME:g}] seconds, got {args.time}")
    if args.search_threads < 1:
        parser.error(f"--search-threads must be at least 1, got {args.search_threads}")
    if args.torch_threads < 1:
        parser.error(f"--torch-threads must be at least 1, got {args.torch_threads}")
    if args.run is not None and not Path(args.run).is_dir():
        parser.error(f"--run {args.run}: no such folder")
    for option, folders in (("--models", args.models), ("--records", args.records)):
        for folder in folders:
            if not folder.is_dir():
                parser.error(f"{option} {folder}: no such folder")
    if args.replay is not None and not Path(args.replay).is_file():
        parser.error(f"--replay {args.replay}: no such file")
    try:
        board = board_spec(args.board).label()
    except NotationError as error:
        parser.error(f"--board: {error}")
    import uvicorn  # after the checks: a bad argument answers at once

    config = WebConfig(model=args.model, model_dirs=tuple(args.models),
                       record_dirs=tuple(args.records), time_per_move=args.time, board=board,
                       games_dir=None if args.no_save else args.games_dir,
                       search_threads=args.search_threads, torch_threads=args.torch_threads,
                       run_dir=args.run, replay=args.replay,
                       allowed_hosts=LOOPBACK_HOSTS if _is_loopback(args.host) else None)
    if not _is_loopback(args.host):
        print(f"warning: listening on {args.host}: anyone who can reach it can play, and read "
              "the record files, models and run directory it serves", file=sys.stderr)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"amazons web board: http://{host}:{args.port}/  (Ctrl-C stops)", flush=True)
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
