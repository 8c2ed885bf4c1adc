"""Take the screenshot in docs/web.md: the Play view with an analysis, in headless Chromium.

    .venv/bin/python docs/web_screenshot.py [--out docs/web.png] [--chromium /usr/bin/chromium]

Plays the first 14 plies of a game of the shipped network against itself, opens them in the
replay view, continues from there in the Play view ("Play on from here"), runs an analysis and
photographs the page, territory overlay included (it is on when the page opens). The PNG is
reduced to a 64-colour palette to keep it small.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

from amazons.board import Board
from amazons.players.factory import build_model_player
from amazons.players.records import GameRecord, write_records

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PLIES = 14


def opening(plies: int) -> list:
    """The first `plies` moves of the shipped network playing itself (64 simulations, seeded)."""
    players = [build_model_player("default", simulations=64, seed=seed) for seed in (1, 2)]
    board = Board()
    moves = []
    for _ in range(plies):
        move = players[board.turn].choose_move(board.copy())
        for player in players:
            player.observe(board, move)
        board.push(move)
        moves.append(move)
    return moves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "web.png")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        record = Path(folder) / "opening.txt"
        write_records(record, [GameRecord.from_game(opening(PLIES), "mcts-net:default",
                                                    "mcts-net:default", event="self-play")])
        server = subprocess.Popen([sys.executable, "-m", "amazons.web", "--port", str(port),
                                   "--model", "default", "--time", "1", "--no-save",
                                   "--records", folder, "--log-level", "warning"], cwd=ROOT)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    urllib.request.urlopen(f"{url}/api/info", timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.2)
            with sync_playwright() as playwright:
                context = playwright.chromium.launch_persistent_context(
                    str(Path(folder) / "profile"), executable_path=args.chromium, headless=True,
                    args=FLAGS, viewport={"width": 1180, "height": 700})
                page = context.new_page()
                page.goto(f"{url}/#replay")
                page.fill("#replay-source input[name=path]", str(record))
                page.click("#replay-source button[type=submit]")
                page.click("#replay-controls button:text('End')")
                page.click("#replay-controls button:text('Play on from here')")
                page.wait_for_selector(f"#play-status[data-state=your-move][data-ply='{PLIES}']")
                page.click("#analyse-button")
                page.wait_for_selector(f"#analysis:not([hidden]) "
                                       f".analysis-about:text('ply {PLIES})')")
                page.wait_for_selector("#play-status[data-state=your-move]")
                page.mouse.move(0, 0)
                page.screenshot(path=str(args.out))
                context.close()
        finally:
            server.terminate()
            server.wait()
    image = Image.open(args.out).convert("RGB")
    image.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KB)")


if __name__ == "__main__":
    main()
