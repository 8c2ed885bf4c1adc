"""The web board in a real browser: headless Chromium (Debian's) driven by Playwright, against
a real uvicorn server (`python -m amazons.web`) on a free loopback port, started and stopped here.

`make test` installs Chromium when it is missing (the Makefile's `browser` target); without it
these tests fail and say how to get it. `AMAZONS_CHROMIUM` names another Chromium binary.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from playwright.sync_api import Page, sync_playwright

from amazons.board import Board, Move
from amazons.matches.arena import play_game
from amazons.players.player import RandomPlayer
from amazons.players.records import GameRecord, read_records, write_records
from amazons.web.views import board_squares

CHROMIUM = os.environ.get("AMAZONS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server(NamedTuple):
    """A running board and the folders it was started with."""

    url: str
    games: Path  # --games-dir: the record files of the games played
    records: Path  # --records: the record files the replay view may name
    run: Path  # --run: the one run directory the watch view may follow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`python -m amazons.web` with rollout MCTS at 0.05 s a move, serving a folder of record
    files and a run directory (the page may name no other path)."""
    folder = tmp_path_factory.mktemp("web")
    served = Server("", folder / "games", folder / "records", folder / "run")
    for path in (served.records, served.run):
        path.mkdir()
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "amazons.web", "--port", str(port), "--model", "none",
         "--time", "0.05", "--games-dir", str(served.games), "--records", str(served.records),
         "--run", str(served.run), "--log-level", "warning"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/info", timeout=1) as answer:
                assert json.load(answer)["model"] == "none"
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"the server did not start:\n{process.stdout.read()}")
            time.sleep(0.2)
    try:
        yield served._replace(url=url)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A persistent Chromium context with a fresh profile folder."""
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium) or "
                    "set AMAZONS_CHROMIUM to a Chromium binary")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 900})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture()
def page(browser):
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    page.close()
    assert not errors, errors


def random_game(seed: int) -> list[Move]:
    _, moves = play_game(RandomPlayer(seed), RandomPlayer(seed + 1))
    return moves


def shown_squares(page: Page, board: str) -> str:
    return page.get_attribute(f"{board} svg", "data-squares")


def tinted_squares(page: Page, board: str) -> tuple[list[int], list[int]]:
    """The squares the board tints as Black's and as White's territory."""
    return tuple(sorted(int(square) for square in page.locator(f"{board} .sq.{kind}").evaluate_all(
        "nodes => nodes.map(node => node.dataset.square)")) for kind in ("own-black", "own-white"))


def owned_squares(board: Board) -> tuple[list[int], list[int]]:
    """The squares `Board.territory()` gives Black and White."""
    territory = board.territory()
    return (sorted(np.flatnonzero(territory > 0).tolist()),
            sorted(np.flatnonzero(territory < 0).tolist()))


def load_record(page: Page, url: str, path: Path) -> None:
    page.goto(f"{url}/#replay")
    page.fill("#replay-source input[name=path]", str(path))
    page.click("#replay-source button[type=submit]")
    page.wait_for_selector("#replay-message[data-state=loaded]")


def click_move(page: Page) -> Move:
    """Click the first highlighted amazon, destination and arrow square; return that move."""
    squares = []
    for kind in ("legal-src", "legal-dst", "legal-arrow"):
        target = page.locator(f"#play-board .sq.{kind}").first
        squares.append(int(target.get_attribute("data-square")))
        target.click()
    return Move(*squares)


def test_a_whole_game_by_clicks_against_the_ai(server, page):
    url, games_dir = server.url, server.games
    moves = random_game(21)
    start = len(moves) - 9  # a few moves from the end of a random game
    source = server.records / "source.txt"
    write_records(source, [GameRecord.from_game(moves, "random", "random", event="test")])
    load_record(page, url, source)
    page.click("#replay-controls button:text('End')")
    for _ in range(len(moves) - start):
        page.keyboard.press("ArrowLeft")
    assert page.get_attribute("#replay-controls .viewer", "data-ply") == str(start)
    page.click("#replay-controls button:text('Play on from here')")
    human = ("black", "white")[start % 2]
    status = page.locator("#play-status")
    page.wait_for_function(f"document.querySelector('#play-status').dataset.state === 'your-move'"
                           f" && document.querySelector('#play-status').dataset.ply === '{start}'")
    assert page.url.endswith("#play")
    assert shown_squares(page, "#play-board") == board_squares(Board.from_moves(moves[:start]))

    clicked = []
    for _ in range(40):
        if status.get_attribute("data-state") == "over":
            break
        ply = int(status.get_attribute("data-ply"))
        clicked.append((ply, click_move(page)))
        page.wait_for_function(
            "(ply) => { const s = document.querySelector('#play-status').dataset;"
            " return Number(s.ply) > ply && (s.state === 'your-move' || s.state === 'over'); }",
            arg=ply)
    assert status.get_attribute("data-state") == "over" and clicked
    final_ply = int(status.get_attribute("data-ply"))
    page.wait_for_selector(f"#play-saved[data-plies='{final_ply}']")
    [saved] = games_dir.glob("web-*.txt")
    [record] = read_records(saved)
    assert record.moves[:start] == moves[:start] and len(record.moves) == final_ply
    for ply, move in clicked:
        assert record.moves[ply] == move and ply % 2 == start % 2  # the human's moves, clicked
    final = record.board()
    assert final.is_game_over() and record.winner == 1 - final.turn
    assert record.headers["Opening"] == str(start)
    assert record.headers[human.capitalize()] == "human"
    assert shown_squares(page, "#play-board") == board_squares(final)
    assert f"({record.result})" in status.inner_text()
    listed = page.locator("#play-moves li").all_inner_texts()
    assert listed == [str(move) for move in record.moves]


def test_analysis_territory_and_decided_positions(server, page):
    url = server.url
    moves = random_game(5)  # 6 plies before its end, Black to move has a proven win
    source = server.records / "proven.txt"
    write_records(source, [GameRecord.from_game(moves, "random", "random", event="test")])
    separated = random_game(14)  # the amazons are separated from the first adjudicated ply on
    split = next(ply for ply in range(len(separated))
                 if Board.from_moves(separated[:ply]).adjudicate() is not None)
    separated_source = server.records / "separated.txt"
    write_records(separated_source,
                  [GameRecord.from_game(separated, "random", "random", event="test")])
    page.goto(f"{url}/#play")
    page.wait_for_selector("body[data-ready=true]")
    page.fill("#new-game input[name=time]", "1")  # time enough for the proof on a busy machine
    load_record(page, url, source)
    page.click("#replay-controls button:text('End')")
    for _ in range(6):
        page.keyboard.press("ArrowLeft")
    page.click("#replay-controls button:text('Play on from here')")
    page.wait_for_selector(f"#play-status[data-state=your-move][data-ply='{len(moves) - 6}']")
    assert page.is_hidden("#play-decided") and page.is_hidden("#analysis")
    position = Board.from_moves(moves[:-6])
    owned = owned_squares(position)
    assert tinted_squares(page, "#play-board") == owned and owned[0] and owned[1]
    assert page.get_attribute("#play-territory .territory-balance", "data-balance") == \
        str(len(owned[0]) - len(owned[1]))
    page.uncheck("#play-territory input.territory-toggle")  # the overlay off, then on again
    assert tinted_squares(page, "#play-board") == ([], [])
    assert page.get_attribute("#play-board svg", "data-territory") == "off"
    page.check("#play-territory input.territory-toggle")
    assert tinted_squares(page, "#play-board") == owned
    page.click("#analyse-button")
    page.wait_for_selector("#play-decided:not([hidden])")
    assert page.inner_text("#play-decided").startswith("Decided: Black wins (proven by the search")
    assert page.inner_text("#play-eval .eval-label") == "1-0"
    assert "proven win for black" in page.inner_text("#analysis .analysis-summary")
    rows = page.locator("#analysis .top-moves tbody tr")
    assert rows.count() >= 1 and "win in" in rows.first.inner_text()
    assert page.locator("#play-board line.move-arrow.hint").count() == 2  # the best move, drawn

    load_record(page, url, separated_source)  # the territory of replayed positions, then play on
    page.eval_on_selector("#replay-controls .ply-slider", f"(slider) => {{ slider.value = {split};"
                          " slider.dispatchEvent(new Event('input')); }")
    page.wait_for_selector(f"#replay-controls .viewer[data-ply='{split}']")
    position = Board.from_moves(separated[:split])
    assert tinted_squares(page, "#replay-board") == owned_squares(position)
    page.click("#replay-controls button:text('Play on from here')")
    page.wait_for_selector(f"#play-status[data-state=your-move][data-ply='{split}']")
    page.wait_for_selector("#play-decided[data-by=adjudication]")
    text = position.adjudicate().describe()  # "decided: White wins by at least 5 moves"
    assert page.inner_text("#play-decided") == f"D{text[1:]}."
    assert tinted_squares(page, "#play-board") == owned_squares(position)


def test_replaying_a_record_steps_jumps_and_autoplays(server, page):
    url = server.url
    games = [random_game(31), random_game(32)]
    path = server.records / "games.txt"
    write_records(path, [GameRecord.from_game(moves, "random", "random", event="test")
                         for moves in games])
    moves = games[1]
    boards = [Board()]
    for move in moves:
        boards.append(boards[-1].copy())
        boards[-1].push(move)
    load_record(page, url, path)
    assert "2 games" in page.inner_text("#replay-message")
    page.click("#replay-games tr[data-game='2']")
    viewer = "#replay-controls .viewer"
    page.wait_for_selector(f"{viewer}[data-game='2'][data-ply='0']")

    def expect(ply: int) -> None:
        page.wait_for_selector(f"{viewer}[data-ply='{ply}']")
        assert shown_squares(page, "#replay-board") == board_squares(boards[ply])

    expect(0)
    for _ in range(3):
        page.click(f"{viewer} button:text('Forward')")
    expect(3)
    last = page.locator("#replay-board .sq.last")
    assert sorted(int(square) for square in last.evaluate_all(
        "nodes => nodes.map(node => node.dataset.square)")) == sorted(set(moves[2].as_tuple()))
    page.keyboard.press("ArrowLeft")
    expect(2)
    page.eval_on_selector(f"{viewer} .ply-slider",
                          "(slider) => { slider.value = 17;"
                          " slider.dispatchEvent(new Event('input')); }")
    expect(17)
    page.click(f"{viewer} .move-list li >> nth=9")
    expect(10)
    page.click(f"{viewer} button:text('End')")
    expect(len(moves))
    assert (f"has no move: {('1-0', '0-1')[(len(moves) - 1) % 2]}"
            in page.inner_text(f"{viewer} .ply-label"))
    page.click(f"{viewer} button:text('Start')")
    expect(0)
    page.select_option(f"{viewer} select.speed", "0.1")
    page.eval_on_selector(f"{viewer} .ply-slider",
                          f"(slider) => {{ slider.value = {len(moves) - 6};"
                          " slider.dispatchEvent(new Event('input')); }")
    page.click(f"{viewer} button:text-is('Play')")
    page.wait_for_selector(f"{viewer}[data-playing='false'][data-ply='{len(moves)}']",
                           timeout=10_000)
    expect(len(moves))
    assert page.locator(f"{viewer} .move-list li").count() == len(moves)

    page.set_input_files("#replay-source input[name=upload]", str(path))
    page.wait_for_selector(f"{viewer}[data-game='1'][data-ply='0']")
    assert "games.txt: 2 games" in page.inner_text("#replay-message")


def test_watching_a_run_shows_new_games_and_plots(server, page):
    url, run_dir = server.url, server.run
    (run_dir / "games").mkdir()
    (run_dir / "config.json").write_text(json.dumps({"preset": "cpu", "iterations": 5}))
    (run_dir / "elo.json").write_text(json.dumps({"ratings": {"random": 0, "iter-0001": 120.5}}))
    lines = [{"iteration": 1, "train/loss": 8.0, "train/policy_loss": 7.0, "train/value_mse": 1.0,
              "eval/elo": 120.5}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    games = [random_game(41), random_game(42)]
    games_file = run_dir / "games" / "selfplay.txt"
    write_records(games_file,
                  [GameRecord.from_game(games[0], "selfplay", "selfplay", event="selfplay")])
    page.goto(f"{url}/#watch")
    page.fill("#watch-source input[name=dir]", str(run_dir))
    page.click("#watch-source button[type=submit]")
    page.wait_for_selector("#watch-status[data-games='1']")
    assert page.get_attribute("#plot-elo svg", "data-series") == "new model:1"
    assert page.get_attribute("#plot-loss svg", "data-series") == "loss:1,policy_loss:1,value_mse:1"
    assert page.locator("#watch-ladder td").all_inner_texts() == ["iter-0001", "121", "random", "0"]
    page.wait_for_selector("#watch-controls .viewer[data-game='1']")
    write_records(games_file,
                  [GameRecord.from_game(games[1], "selfplay", "selfplay", event="selfplay")],
                  append=True)
    with (run_dir / "metrics.jsonl").open("a") as stream:
        stream.write(json.dumps({"iteration": 2, "train/loss": 6.0, "eval/elo": 150.0}) + "\n")
    page.wait_for_selector("#watch-status[data-games='2']")
    assert page.get_attribute("#plot-elo svg", "data-series") == "new model:2"
    assert page.locator("#watch-games tbody tr").count() == 2
    page.click("#watch-games tr[data-game='2']")  # the newest, shown on the board
    viewer = "#watch-controls .viewer"
    page.wait_for_selector(f"{viewer}[data-game='2']")
    page.click(f"{viewer} button:text('End')")
    page.wait_for_selector(f"{viewer}[data-ply='{len(games[1])}']")
    assert shown_squares(page, "#watch-board") == board_squares(Board.from_moves(games[1]))


def test_a_10x10_game_by_clicks_and_its_replay(server, page):
    page.goto(f"{server.url}/#play")
    page.wait_for_selector("body[data-ready=true]")
    page.select_option("#new-game select[name=board]", "standard10")
    page.select_option("#new-game select[name=side]", "black")  # White, the AI, moves first
    page.click("#new-game-button")
    page.wait_for_selector("#play-board svg[data-board=standard10]")
    page.wait_for_selector("#play-status[data-state=your-move][data-ply='1']")
    assert page.get_attribute("#play-board svg", "data-size") == "10"
    assert page.locator("#play-board .sq").count() == 100
    labels = page.locator("#play-board .coords text").evaluate_all(
        "nodes => nodes.map(node => node.textContent)")
    assert labels[:2] == ["a", "10"] and labels[-2:] == ["j", "1"]
    clicked = click_move(page)
    page.wait_for_selector("#play-status[data-state=your-move][data-ply='3']")
    page.wait_for_selector("#play-saved[data-plies='3']")
    saved = max(server.games.glob("web-*.txt"), key=lambda path: path.stat().st_mtime)
    [record] = read_records(saved)
    assert record.headers["Board"] == "standard10" and len(record.moves) == 3
    assert record.moves[1].as_tuple() == clicked.as_tuple()
    assert shown_squares(page, "#play-board") == board_squares(record.board())
    listed = page.locator("#play-moves li")
    assert listed.all_inner_texts() == [str(move) for move in record.moves]
    assert listed.evaluate_all("nodes => nodes.map(node => node.className)") == \
        ["white", "black", "white"]

    load_record(page, server.url, saved)  # replayed on a 10x10 board, back to 8x8 after
    viewer = "#replay-controls .viewer"
    page.wait_for_selector(f"{viewer}[data-board=standard10][data-ply='0']")
    page.click(f"{viewer} button:text('End')")
    page.wait_for_selector(f"{viewer}[data-ply='3']")
    assert page.get_attribute("#replay-board svg", "data-size") == "10"
    assert shown_squares(page, "#replay-board") == board_squares(record.board())
    page.keyboard.press("ArrowLeft")
    page.wait_for_selector(f"{viewer}[data-ply='2']")
    assert "white to move" in page.inner_text(f"{viewer} .ply-label")  # White plays even plies
    eight = server.records / "eight.txt"
    write_records(eight, [GameRecord.from_game(random_game(7), "random", "random")])
    load_record(page, server.url, eight)
    page.wait_for_selector(f"{viewer}[data-board=botzone8][data-ply='0']")
    assert page.locator("#replay-board .sq").count() == 64
