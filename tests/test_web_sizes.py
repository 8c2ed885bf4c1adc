"""The web board's API on boards other than Botzone's 8x8: a 10x10 game from its start to moves,
the AI's replies and the saved record; 6x6 and user starts; records of any size replayed; flat
networks refused off 8x8 by name.

Starlette's TestClient, the real engine and real searches (rollout MCTS: no network), as in
tests/test_web_api.py; the oracle is `Board` on the game's start.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from starlette.testclient import TestClient
from test_web_api import legal_set

from amazons.board import WHITE, Board, Move
from amazons.boards import BOARDS, BoardSpec
from amazons.models import default_model_path
from amazons.players.records import GameRecord, read_records
from amazons.web import WebConfig, create_app
from amazons.web.__main__ import main as web_main
from amazons.web.views import board_squares

FAST = {"model": "none", "simulations": 24, "seed": 1}


@pytest.fixture()
def client(tmp_path):
    app = create_app(WebConfig(model="none", games_dir=tmp_path / "games", record_dirs=(tmp_path,),
                               warm_up=False))
    with TestClient(app) as test_client:
        yield test_client


def wait_idle(client: TestClient, game_id: str, timeout: float = 60.0) -> dict:
    """The game's state once no search runs and its record holds every ply (the AI's move is
    on the board before its record is written)."""
    deadline = time.monotonic() + timeout
    while True:
        state = client.get(f"/api/games/{game_id}").json()
        if state["busy"] is None and (not state["ply"] or state["saved_plies"] == state["ply"]):
            return state
        assert time.monotonic() < deadline, f"game {game_id} still {state['busy']}"
        time.sleep(0.02)


def replayed(state: dict) -> Board:
    """The board of a state's moves, played from its start by the engine (the AI moved legally
    when this replays)."""
    return Board.from_moves([move["algebraic"] for move in state["moves"]],
                            start=state["board"]["label"])


def check_state(state: dict) -> Board:
    """A state's board, squares, legal moves and territory against the engine's; the board."""
    board = replayed(state)
    size = board.size
    assert state["board"]["size"] == size and len(state["squares"]) == size * size
    assert state["squares"] == board_squares(board) and state["position"] == board.position_string()
    assert state["turn"] == ("black", "white")[board.turn] and state["ply"] == board.ply
    assert state["territory"]["owner"] == board.territory().tolist()
    if state["legal"] is not None:
        assert legal_set(state) == {tuple(row) for row in board.legal_move_array().tolist()}
    return board


def test_a_10x10_game_the_ai_opens_moves_undo_and_record(client):
    # On standard10 White moves first: the human plays Black, so the AI opens.
    state = client.post("/api/games", json={"side": "black", "board": "standard10", **FAST})
    assert state.status_code == 201, state.text
    state = state.json()
    assert state["board"] == {**BOARDS["standard10"].to_dict(), "label": "standard10"}
    assert state["board"]["first"] == "white" and state["busy"] == "thinking"
    game_id = state["id"]
    state = wait_idle(client, game_id)
    assert state["error"] is None and state["ply"] == 1 and state["turn"] == "black"
    board = check_state(state)
    analysis = state["analysis"]
    assert analysis["kind"] == "ai-move" and analysis["turn"] == "white"
    assert analysis["top"][0]["algebraic"] == state["moves"][0]["algebraic"]
    for entry in analysis["top"]:  # real-frame 10x10 moves of the position the AI searched
        assert Move(*entry["squares"], size=10) in Board(start="standard10").legal_moves()

    # The human's move in algebraic notation of 10x10 (rank 10), then in Botzone's coordinates.
    move = next(legal for legal in board.legal_moves() if str(legal).startswith("d10-"))
    answer = client.post(f"/api/games/{game_id}/move", json={"move": str(move)})
    assert answer.status_code == 200, answer.text
    assert answer.json()["moves"][1] == {"algebraic": str(move), "botzone": move.to_botzone(),
                                         "squares": list(move.as_tuple())}
    state = wait_idle(client, game_id)
    assert state["ply"] == 3 and state["error"] is None
    board = check_state(state)
    move = board.legal_moves()[-1]
    answer = client.post(f"/api/games/{game_id}/move", json={"move": move.to_botzone()})
    assert answer.status_code == 200, answer.text
    state = wait_idle(client, game_id)
    assert state["ply"] == 5 and state["saved_plies"] == 5
    check_state(state)

    [record] = read_records(state["saved"])
    assert record.start == BOARDS["standard10"] and record.headers["Board"] == "standard10"
    assert [str(move) for move in record.moves] == [move["algebraic"] for move in state["moves"]]
    assert record.black == "human" and record.white == "mcts-rollout"
    text = client.get(f"/api/games/{game_id}/record").text
    assert text == record.to_text() + "\n"

    # Undo takes back the human's last move and the AI's reply: plies 3 and 4 of a game White
    # opened (Black's plies are the odd ones), so the AI's opening move stays.
    state = client.post(f"/api/games/{game_id}/undo").json()
    assert state["ply"] == 3 and state["turn"] == "black"
    check_state(state)
    client.post(f"/api/games/{game_id}/undo")
    state = client.post(f"/api/games/{game_id}/undo")
    assert state.status_code == 409 and "nothing to undo" in state.json()["error"]
    assert client.get(f"/api/games/{game_id}").json()["ply"] == 1


def test_the_human_opens_10x10_as_white_and_moves_name_10x10_squares(client):
    state = client.post("/api/games", json={"side": "white", "board": "standard10", **FAST}).json()
    assert state["busy"] is None and state["turn"] == "white" and state["human"] == ["white"]
    check_state(state)
    game_id = state["id"]
    refused = client.post(f"/api/games/{game_id}/move", json={"move": "j4-j8/j9"})
    assert refused.status_code == 400  # j8 lies beyond Black's amazon on j7
    assert "j4" in refused.json()["error"] and "j8" in refused.json()["error"]
    refused = client.post(f"/api/games/{game_id}/move", json={"move": "k4-k5/k6"})
    assert refused.status_code == 400 and "'k4'" in refused.json()["error"]
    assert client.get(f"/api/games/{game_id}").json()["ply"] == 0
    answer = client.post(f"/api/games/{game_id}/move", json={"move": "j4-j5/j6"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["moves"][0]["squares"] == [69, 59, 49]
    state = wait_idle(client, game_id)
    assert state["ply"] == 2 and state["turn"] == "white"
    check_state(state)
    analysis = client.post(f"/api/games/{game_id}/analyse", json={"simulations": 40}).json()
    board = replayed(state)
    assert analysis["ply"] == 2 and len(analysis["squares"]) == 100
    legal = set(board.legal_moves())
    assert analysis["top"] and all(Move(*entry["squares"], size=10) in legal
                                   for entry in analysis["top"])
    line = board.copy()
    for entry in analysis["pv"]:  # the principal variation is a line of legal 10x10 moves
        line.push(Move(*entry["squares"], size=10))


def test_6x6_and_a_users_start_continued_from_moves(client):
    board = Board(start="openspiel6")
    moves = []
    for _ in range(4):
        moves.append(board.legal_moves()[0])
        board.push(moves[-1])
    state = client.post("/api/games", json={"side": "both", "board": "openspiel6",
                                            "moves": [str(move) for move in moves], **FAST})
    assert state.status_code == 201, state.text
    state = state.json()
    assert state["opening"] == 4 and state["board"]["size"] == 6
    assert check_state(state) == board

    spec = BoardSpec(7, (0, 6, 14, 20), (28, 34, 42, 48), WHITE)
    start = spec.position_string()
    state = client.post("/api/games", json={"side": "both", "board": start, **FAST}).json()
    assert state["board"]["name"] == "" and state["board"]["label"] == start
    assert state["board"]["size"] == 7 and state["turn"] == "white"
    check_state(state)
    move = replayed(state).legal_moves()[0]
    state = client.post(f"/api/games/{state['id']}/move", json={"move": str(move)}).json()
    assert state["ply"] == 1
    check_state(state)
    [summary] = client.get("/api/games").json()[-1:]
    assert summary["ply"] == 1


@pytest.mark.parametrize(("body", "problem"), [
    ({"board": "standard12"}, "field 'board': unknown board 'standard12'"),
    ({"board": 10}, "field 'board' must be a board name"),
    ({"board": "3B2B3/10/10/B8B/10/10/W8W/10/10/3W2W3 w 4"}, "a start position is at ply 0"),
    ({"board": "standard10", "moves": ["c8-c6/d7"]}, "field 'moves': move 1"),
    ({"board": "openspiel6", "moves": ["g1-g2/g3"]}, "field 'moves[0]'"),
    ({"board": "standard10", "model": str(default_model_path(8))},
     f"model {default_model_path(8)} cannot play 10x10 boards"),
])
def test_bad_boards_and_flat_networks_are_refused_by_name(client, body, problem):
    answer = client.post("/api/games", json={**FAST, **body})
    assert answer.status_code == 400, answer.text
    assert problem in answer.json()["error"]
    assert client.get("/api/games").json() == []


def test_the_default_network_plays_8x8_and_10x10_and_the_info_lists_the_boards(client):
    info = client.get("/api/info").json()
    assert info["board"] == "botzone8"
    assert [board["name"] for board in info["boards"]] == list(BOARDS)
    assert {board["name"]: board["size"] for board in info["boards"]}["standard10"] == 10
    state = client.post("/api/games", json={"board": "botzone8", "model": "default",
                                            "side": "both"})
    assert state.status_code == 201, state.text
    assert state.json()["board"]["name"] == "botzone8"
    # on 10x10, "default" is the shipped 10x10 model (pooled value head), not the flat one
    state = client.post("/api/games", json={"board": "standard10", "model": "default",
                                            "side": "both"})
    assert state.status_code == 201, state.text
    assert state.json()["board"]["name"] == "standard10"


def test_records_of_any_size_replay(client, tmp_path):
    games = []
    for start, seed in (("standard10", 3), ("openspiel6", 4), ("botzone8", 5)):
        board, rng, moves = Board(start=start), np.random.default_rng(seed), []
        while not board.is_game_over():
            legal = board.legal_moves()
            moves.append(legal[int(rng.integers(len(legal)))])
            board.push(moves[-1])
        games.append((start, moves))
    text = "\n\n".join(GameRecord.from_game(moves, "random", "random", event="test",
                                            start=start).to_text() for start, moves in games)
    listing = client.post("/api/records", json={"text": text}).json()
    assert listing["count"] == 3
    assert [summary["board"]["name"] for summary in listing["games"]] == \
        ["standard10", "openspiel6", "botzone8"]
    for number, (start, moves) in enumerate(games, 1):
        game = client.post("/api/records", json={"text": text, "game": number}).json()["game"]
        assert game["board"]["name"] == start and game["plies"] == len(moves) and game["over"]
        board = Board(start=start)
        assert game["boards"][0] == board_squares(board)
        for ply, move in enumerate(moves, 1):
            board.push(move)
            assert game["moves"][ply - 1]["algebraic"] == str(move)
            assert game["boards"][ply] == board_squares(board)
            assert game["territories"][ply]["owner"] == board.territory().tolist()


def test_the_servers_board_is_a_new_games_unless_it_names_one(tmp_path):
    app = create_app(WebConfig(model="none", games_dir=None, warm_up=False, board="openspiel6"))
    with TestClient(app) as client:
        assert client.get("/api/info").json()["board"] == "openspiel6"
        state = client.post("/api/games", json={"side": "both", **FAST}).json()
        assert state["board"]["name"] == "openspiel6" and len(state["squares"]) == 36
        state = client.post("/api/games", json={"side": "both", "board": "botzone8", **FAST})
        assert state.json()["board"]["name"] == "botzone8"


def test_a_bad_board_on_the_command_line_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        web_main(["--board", "standard12"])
    assert exit_.value.code == 2
    assert "--board: unknown board 'standard12'" in capsys.readouterr().err


@pytest.mark.parametrize("ai", ["random", "greedy", "classical"])
def test_the_ais_without_a_network_play_10x10_and_6x6(client, ai):
    for board in ("standard10", "openspiel6"):
        body = {"side": "black", "board": board, "model": ai, "time": 0.2, "seed": 2}
        state = client.post("/api/games", json=body)
        assert state.status_code == 201, state.text
        state = wait_idle(client, state.json()["id"])
        assert state["error"] is None and state["ply"] == 1 and state["ai"]["name"] == ai
        assert state["analysis"] is None  # the AI's move came without a search
        check_state(state)
        game_id = state["id"]
        move = replayed(state).legal_moves()[0]
        assert client.post(f"/api/games/{game_id}/move", json={"move": str(move)}).status_code \
            == 200
        state = wait_idle(client, game_id)
        assert state["ply"] == 3 and state["error"] is None
        check_state(state)
        # An analysis is rollout MCTS's: legal moves of the game's board.
        analysis = client.post(f"/api/games/{game_id}/analyse", json={"simulations": 30}).json()
        legal = set(replayed(state).legal_moves())
        assert analysis["top"] and all(
            Move(*entry["squares"], size=state["board"]["size"]) in legal
            for entry in analysis["top"])
        [record] = read_records(state["saved"])
        assert record.white == ai and record.start.name == board
