"""The web board's HTTP and websocket API (`amazons.web`), through Starlette's TestClient.

Real engine, real searches on the app's worker threads (rollout MCTS: no torch), real record
files. Bad requests must get a 4xx with a message naming the problem and leave the game as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from amazons.board import COLOR_NAMES, Board, Move
from amazons.matches.arena import play_game
from amazons.players.player import RandomPlayer
from amazons.players.records import GameRecord, read_records, write_records
from amazons.web import WebConfig, create_app
from amazons.web.__main__ import main as web_main
from amazons.web.app import LOOPBACK_HOSTS
from amazons.web.views import board_squares

FAST = {"model": "none", "simulations": 24, "seed": 1}
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture()
def client(tmp_path):
    # The board serves the record files in tmp_path (--records) and watches tmp_path/run (--run).
    app = create_app(WebConfig(model="none", games_dir=tmp_path / "games", record_dirs=(tmp_path,),
                               run_dir=str(tmp_path / "run"), poll_seconds=0.05))
    with TestClient(app) as test_client:
        yield test_client


def random_game(seed: int) -> list[Move]:
    _, moves = play_game(RandomPlayer(seed), RandomPlayer(seed + 1))
    return moves


def separated_game(seed: int) -> list[Move]:
    """A seeded random game up to the first position `Board.adjudicate()` decides."""
    players = [RandomPlayer(seed), RandomPlayer(seed + 1)]
    board = Board()
    moves = []
    while board.adjudicate() is None:
        moves.append(players[board.turn].choose_move(board))
        board.push(moves[-1])
    return moves


def wait_idle(client: TestClient, game_id: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = client.get(f"/api/games/{game_id}").json()
        if state["busy"] is None:
            return state
        assert time.monotonic() < deadline, f"game {game_id} still {state['busy']}"
        time.sleep(0.02)


def legal_set(state: dict) -> set[tuple[int, int, int]]:
    return {(int(src), int(dst), arrow) for src, dsts in state["legal"].items()
            for dst, arrows in dsts.items() for arrow in arrows}


def test_a_game_against_the_ai_with_live_updates_and_a_saved_record(client, tmp_path):
    state = client.post("/api/games", json={"side": "black", **FAST}).json()
    game_id = state["id"]
    assert (state["ply"], state["turn"], state["busy"], state["human"]) == \
           (0, "black", None, ["black"])
    assert state["squares"] == board_squares(Board())
    assert legal_set(state) == {tuple(row) for row in Board().legal_move_array().tolist()}
    with client.websocket_connect(f"/api/games/{game_id}/ws") as socket:
        assert socket.receive_json()["state"]["version"] == state["version"]
        answer = client.post(f"/api/games/{game_id}/move", json={"move": "c8-c6/d7"})
        assert answer.status_code == 200
        assert answer.json()["moves"][0]["algebraic"] == "c8-c6/d7"
        assert answer.json()["legal"] is None  # the AI's turn: nothing to click
        seen = []
        while not seen or seen[-1]["saved_plies"] != 2:  # the reply, then its record written
            seen.append(socket.receive_json()["state"])
    versions = [pushed["version"] for pushed in seen]
    assert versions == sorted(versions)
    assert "thinking" in [pushed["busy"] for pushed in seen]
    final = seen[-1]
    board = Board.from_moves([move["algebraic"] for move in final["moves"]])  # the AI moved legally
    assert final["squares"] == board_squares(board) and final["turn"] == "black"
    analysis = final["analysis"]
    assert analysis["kind"] == "ai-move" and analysis["ply"] == 1 and analysis["turn"] == "white"
    assert analysis["black_value"] == pytest.approx(-analysis["value"])
    assert analysis["top"][0]["algebraic"] == final["moves"][1]["algebraic"]
    visits = [entry["visits"] for entry in analysis["top"]]
    assert visits == sorted(visits, reverse=True) and analysis["simulations"] >= 24
    shares = [entry["share"] for entry in analysis["top"]]
    assert all(0 < share <= 1 for share in shares) and sum(shares) <= 1.0 + 1e-6
    records = read_records(final["saved"])
    assert final["busy"] is None and len(records) == 1
    assert [str(move) for move in records[0].moves] == ["c8-c6/d7", final["moves"][1]["algebraic"]]
    assert records[0].headers["Event"] == "web" and records[0].black == "human"
    assert records[0].white == "mcts-rollout" and records[0].headers["Model"] == "none"
    text = client.get(f"/api/games/{game_id}/record")
    assert text.headers["content-type"].startswith("text/plain")
    assert text.text == records[0].to_text() + "\n"
    assert Path(final["saved"]).parent == tmp_path / "games"
    assert client.get("/api/games").json() == [
        {"id": game_id, "ply": 2, "over": False, "busy": None, "human": ["black"]}]
    assert client.delete(f"/api/games/{game_id}").status_code == 204
    assert client.get(f"/api/games/{game_id}").status_code == 404
    assert read_records(final["saved"]) == records  # the record file stays


def test_a_game_against_the_shipped_network(client):
    state = client.post("/api/games", json={"side": "white", "model": "default", "simulations": 32,
                                            "seed": 0}).json()
    assert state["ai"] == {"name": "mcts-net:default", "model": "default",
                           "search": "32 simulations"}
    state = wait_idle(client, state["id"])
    assert state["ply"] == 1 and state["error"] is None
    Board.from_moves([state["moves"][0]["algebraic"]])
    assert state["analysis"]["simulations"] >= 32 and -1 <= state["analysis"]["value"] <= 1


def test_a_game_against_a_torch_checkpoint_runs_the_prepared_model(client):
    from amazons.models import default_checkpoint_path

    model = str(default_checkpoint_path())
    state = client.post("/api/games", json={"side": "white", "model": model, "simulations": 16,
                                            "seed": 0}).json()
    assert state["ai"]["name"] == f"mcts-net:{model}"
    state = wait_idle(client, state["id"])
    assert state["ply"] == 1 and state["error"] is None
    import torch  # loaded by the checkpoint's AI, set to one thread per search by the server

    assert torch.get_num_threads() == 1


def test_a_game_may_name_only_the_models_the_board_serves(tmp_path):
    # The board serves its --models folder and its --run folder (and 'default', 'none', the
    # shipped files): a model inside them plays; a path outside, a `..` climbing out of a served
    # folder, and a link inside it that points out are refused, all in the same words whether
    # or not a file is there (the refusal tells nothing of the server's files).
    from amazons.models import default_model_path

    served, run, outside = tmp_path / "served", tmp_path / "run", tmp_path / "outside"
    for folder in (served, run / "models", outside):
        folder.mkdir(parents=True)
    for path in (served / "model.npz", run / "models" / "model-0001.npz", outside / "secret.npz"):
        path.write_bytes(default_model_path().read_bytes())
    (served / "link-out.npz").symlink_to(outside / "secret.npz")
    app = create_app(WebConfig(model="none", model_dirs=(served,), run_dir=str(run),
                               games_dir=None, warm_up=False))
    game = {"side": "white", "simulations": 8, "seed": 0}
    with TestClient(app) as client:
        assert client.get("/api/info").json()["model_dirs"] == [str(served), str(run)]
        for path in (served / "model.npz", run / "models" / "model-0001.npz"):
            answer = client.post("/api/games", json={**game, "model": str(path)})
            assert answer.status_code == 201, answer.json()
            assert answer.json()["ai"]["name"] == f"mcts-net:{path}"
            assert wait_idle(client, answer.json()["id"])["ply"] == 1
        refusals = {}
        for path in (str(outside / "secret.npz"), str(outside / "missing.npz"),
                     f"{served}/../outside/secret.npz", f"{served}/../outside/missing.npz",
                     str(served / "link-out.npz"), "/etc/passwd", "/no/such/model.npz"):
            answer = client.post("/api/games", json={**game, "model": path})
            assert answer.status_code == 400, (path, answer.json())
            refusals[path] = answer.json()["error"].replace(repr(path), "MODEL")
        assert len(set(refusals.values())) == 1, refusals  # the same words for every path
        assert "is not one this board serves" in next(iter(refusals.values()))
        missing = client.post("/api/games", json={**game, "model": str(served / "missing.npz")})
        assert missing.status_code == 400 and "does not exist" in missing.json()["error"]
        assert len(client.get("/api/games").json()) == 2  # the refused made no game


def test_the_ai_opens_for_a_human_playing_white(client):
    state = client.post("/api/games", json={"side": "white", **FAST}).json()
    assert state["busy"] == "thinking"  # the answer already says the AI has started
    state = wait_idle(client, state["id"])
    assert state["ply"] == 1 and state["turn"] == "white" and state["legal"]


BAD_GAMES = [
    ({"side": "red"}, "'side' must be one of black, white, both"),
    ({"sides": "black"}, "unknown field 'sides'"),
    ({"time": -1, "simulations": None}, "'time' must be a positive number"),
    ({"time": 1e9, "simulations": None}, "'time' must be at most 60"),
    ({"time": 1, "simulations": 10}, "either 'time' or 'simulations'"),
    ({"simulations": 0}, "'simulations' must be in 1.."),
    ({"simulations": "many"}, "'simulations' must be an integer"),
    ({"seed": True}, "'seed' must be an integer"),
    ({"model": "/no/such/model.pt"}, "'/no/such/model.pt' is not one this board serves"),
    ({"moves": "c8-c6/d7"}, "'moves' must be a list of move strings"),
    ({"moves": ["c8-c6/d7", "c8-c1/c2"]}, "moves[1]' ... "),
    ({"moves": ["c8-c6/d7", "z9"]}, "field 'moves[1]': bad move 'z9'"),
]


@pytest.mark.parametrize(("body", "message"), BAD_GAMES)
def test_bad_new_games_are_refused_with_the_reason(client, body, message):
    answer = client.post("/api/games", json={**FAST, **body})
    assert answer.status_code == 400
    error = answer.json()["error"]
    if message.endswith(" ... "):  # an illegal move in `moves`: the engine's reason
        assert "illegal move c8-c1/c2 for white" in error and "'moves'" in error
    else:
        assert message in error
    assert client.get("/api/games").json() == []


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{bad", 400, "malformed JSON"),
    (b"[1, 2]", 400, "must be a JSON object, got list"),
    (b"\xff\xfe", 400, "not UTF-8"),
    (json.dumps({"mvoe": "c8-c6/d7"}).encode(), 400, "unknown field 'mvoe'"),
    (b"{}", 400, "field 'move' is missing"),
    (json.dumps({"move": 42}).encode(), 400, "must be a move string"),
    (json.dumps({"move": "c8-c6"}).encode(), 400, "expected three squares"),
    (json.dumps({"move": "c8-c1/c2"}).encode(), 400, "the amazon on c8 cannot reach c1"),
    (json.dumps({"move": "c1-c2/c3"}).encode(), 400, "c1 holds no black amazon"),
    (json.dumps({"move": "2 0 2 2 3 9"}).encode(), 400, "off the 8x8 board"),
])
def test_bad_moves_get_a_4xx_and_change_nothing(client, body, status, message):
    state = client.post("/api/games", json={"side": "black", **FAST}).json()
    game_id = state["id"]
    answer = client.post(f"/api/games/{game_id}/move", content=body)
    assert answer.status_code == status and message in answer.json()["error"]
    after = client.get(f"/api/games/{game_id}").json()
    assert {key: after[key] for key in ("squares", "ply", "moves", "legal", "busy")} == \
           {key: state[key] for key in ("squares", "ply", "moves", "legal", "busy")}
    assert not Path(state["saved"]).exists()  # nothing was played, nothing written


def test_unknown_games_and_routes_are_404_with_a_message(client):
    for method, path in [("GET", "/api/games/nope"), ("POST", "/api/games/nope/move"),
                         ("POST", "/api/games/nope/undo"), ("POST", "/api/games/nope/analyse"),
                         ("GET", "/api/games/nope/record"), ("DELETE", "/api/games/nope"),
                         ("GET", "/api/nothing")]:
        answer = client.request(method, path, json={"move": "c8-c6/d7"})
        assert answer.status_code == 404, (method, path)
        assert answer.json()["error"] in ("unknown game 'nope'", "Not Found")
    assert client.get("/api/games/x/move").status_code == 405
    with client.websocket_connect("/api/games/nope/ws") as socket:
        assert socket.receive_json() == {"type": "error", "error": "unknown game 'nope'",
                                         "status": 404}


def test_other_sites_cannot_drive_the_board(client, tmp_path):
    answer = client.post("/api/games", json=FAST, headers={"Origin": "http://evil.example"})
    assert answer.status_code == 403 \
        and "cross-site request from http://evil.example" in answer.json()["error"]
    assert client.get("/api/games").json() == []
    game = client.post("/api/games", json=FAST, headers={"Origin": "http://testserver"}).json()
    assert client.get(f"/api/games/{game['id']}",
                      headers={"Origin": "http://evil.example"}).status_code == 200
    with pytest.raises(WebSocketDisconnect) as closed:
        with client.websocket_connect(f"/api/games/{game['id']}/ws",
                                      headers={"Origin": "http://evil.example"}):
            pass
    assert closed.value.code == 4403
    loopback = create_app(WebConfig(model="none", games_dir=None, warm_up=False,
                                    allowed_hosts=LOOPBACK_HOSTS))
    with TestClient(loopback, base_url="http://127.0.0.1:8000") as local:
        assert local.get("/api/info").status_code == 200
        assert local.get("/api/info", headers={"Host": "rebound.example:8000"}).status_code == 400


def test_one_search_per_game_and_the_server_answers_meanwhile(client):
    state = client.post("/api/games", json={"side": "white", "model": "none", "time": 1.5}).json()
    game_id = state["id"]
    assert state["busy"] == "thinking"
    started = time.monotonic()
    latencies = []
    refused = []
    while time.monotonic() - started < 0.9:
        before = time.perf_counter()
        assert client.get(f"/api/games/{game_id}").json()["busy"] == "thinking"
        latencies.append(time.perf_counter() - before)
        for path, body in [("move", {"move": "c1-c2/c3"}), ("undo", {}), ("analyse", {})]:
            answer = client.post(f"/api/games/{game_id}/{path}", json=body)
            refused.append((answer.status_code, answer.json()["error"]))
        time.sleep(0.05)
    assert len(latencies) >= 5 and max(latencies) < 0.5  # the event loop is not blocked
    assert {status for status, _ in refused} == {409}
    assert all("the AI is thinking" in error for _, error in refused)
    state = wait_idle(client, game_id)
    assert state["ply"] == 1 and 1.0 <= state["analysis"]["seconds"] <= 3.0


def test_undo_takes_back_the_human_move_and_the_reply(client):
    game_id = client.post("/api/games", json={"side": "black", **FAST}).json()["id"]
    assert client.post(f"/api/games/{game_id}/undo").status_code == 409
    client.post(f"/api/games/{game_id}/move", json={"move": "2 0 2 2 3 1"})
    assert wait_idle(client, game_id)["ply"] == 2
    state = client.post(f"/api/games/{game_id}/undo").json()
    assert state["ply"] == 0 and state["squares"] == board_squares(Board()) and state["legal"]
    assert state["analysis"] is None  # it was about a position no longer on the board
    assert read_records(state["saved"])[0].moves == []  # the file follows the board
    answer = client.post(f"/api/games/{game_id}/undo", json={"steps": 2})
    assert answer.status_code == 400 and "unknown field 'steps'" in answer.json()["error"]

    board_id = client.post("/api/games", json={"side": "both", **FAST}).json()["id"]
    for move in ("c8-c6/d7", "h3-c3/b3"):
        state = client.post(f"/api/games/{board_id}/move", json={"move": move}).json()
        assert state["busy"] is None  # an analysis board: the AI never moves
    state = client.post(f"/api/games/{board_id}/undo").json()
    assert [move["algebraic"] for move in state["moves"]] == ["c8-c6/d7"]


def test_analysis_of_the_current_position(client):
    game_id = client.post("/api/games", json={"side": "both", **FAST}).json()["id"]
    analysis = client.post(f"/api/games/{game_id}/analyse", json={"simulations": 200}).json()
    assert analysis["kind"] == "analysis" and analysis["ply"] == 0 and analysis["turn"] == "black"
    assert analysis["simulations"] >= 200 and analysis["legal_moves"] == Board().count_legal_moves()
    legal = {tuple(row) for row in Board().legal_move_array().tolist()}
    assert all(tuple(entry["squares"]) in legal for entry in analysis["top"])
    assert analysis["pv"][0] == {key: analysis["top"][0][key]
                                 for key in ("algebraic", "botzone", "squares")}
    board = Board()
    for move in analysis["pv"]:  # the line alternates sides and stays legal
        board.push(Move.parse(move["algebraic"]))
    state = client.get(f"/api/games/{game_id}").json()
    assert state["analysis"] == analysis and state["busy"] is None
    for body, message in [({"time": 0}, "'time' must be a positive number"),
                          ({"depth": 3}, "unknown field 'depth'")]:
        answer = client.post(f"/api/games/{game_id}/analyse", json=body)
        assert answer.status_code == 400 and message in answer.json()["error"]


def test_a_proven_position_is_shown_as_decided(client):
    moves = random_game(5)[:-6]  # Black to move, a proven win for Black (the solver finds it)
    body = {"moves": [str(move) for move in moves], "model": "none", "simulations": 400}
    board_id = client.post("/api/games", json={"side": "both", **body}).json()["id"]
    assert client.get(f"/api/games/{board_id}").json()["decided"] is None  # nothing proven yet
    analysis = client.post(f"/api/games/{board_id}/analyse", json={}).json()
    assert (analysis["proven"], analysis["winner"], analysis["turn"]) == (1, "black", "black")
    assert analysis["top"][0]["proof"] == 1
    assert analysis["top"][0]["proof_plies"] == analysis["proof_plies"] > 0
    state = client.get(f"/api/games/{board_id}").json()
    plies = analysis["proof_plies"]
    assert state["decided"] == {
        "winner": "black", "by": "search", "plies": plies,
        "text": f"decided: Black wins (proven by the search: {plies} more plies with best play)"}
    assert Board.from_moves(moves).adjudicate() is None  # proven, but not separated yet
    state = client.post(f"/api/games/{board_id}/move",
                        json={"move": analysis["top"][0]["algebraic"]}).json()
    assert state["decided"] is None  # the analysis was of the position before; nothing claimed

    game = client.post("/api/games", json={"side": "white", **body}).json()  # the AI is Black
    state = wait_idle(client, game["id"])
    assert state["ply"] == len(moves) + 1 and state["analysis"]["proven"] == 1
    assert state["moves"][-1]["algebraic"] == state["analysis"]["top"][0]["algebraic"]
    assert state["decided"]["by"] == "search" and state["decided"]["winner"] == "black"
    assert state["decided"]["plies"] == state["analysis"]["proof_plies"] - 1


def test_a_separated_position_is_decided_by_adjudication(client):
    moves = separated_game(14)
    adjudication = Board.from_moves(moves).adjudicate()
    assert adjudication.margin > 0 and not Board.from_moves(moves).is_game_over()
    body = {"side": "both", "moves": [str(move) for move in moves[:-1]], **FAST}
    game_id = client.post("/api/games", json=body).json()["id"]
    assert client.get(f"/api/games/{game_id}").json()["decided"] is None  # not separated yet
    state = client.post(f"/api/games/{game_id}/move", json={"move": str(moves[-1])}).json()
    expected = {"winner": COLOR_NAMES[adjudication.winner], "by": "adjudication",
                "margin": adjudication.margin, "plies_bound": adjudication.plies_bound,
                "text": adjudication.describe()}
    assert state["decided"] == expected
    assert expected["text"].startswith(
        f"decided: {expected['winner'].capitalize()} wins by at least ")
    client.post(f"/api/games/{game_id}/analyse", json={"simulations": 100})
    assert client.get(f"/api/games/{game_id}").json()["decided"] == expected  # it comes first
    state = client.post(f"/api/games/{game_id}/undo").json()
    assert state["decided"] is None and state["ply"] == len(moves) - 1


def test_the_state_carries_the_territory_of_the_position(client):
    state = client.post("/api/games", json={"side": "both", **FAST}).json()
    owner = state["territory"]["owner"]
    assert owner == Board().territory().tolist() and len(owner) == 64
    assert owner[3] == 1 and owner[60] == -1  # d8 next to c8's Black amazon, e1 next to f1's White
    assert all(owner[8 * y + x] == -owner[8 * (7 - y) + x] for y in range(8) for x in range(8))
    assert state["territory"]["balance"] == 0  # the start is symmetric
    for plies in (24, 25):  # Black to move, then White (the engine works in the mover's frame)
        moves = random_game(14)[:plies]
        board = Board.from_moves(moves)
        state = client.post("/api/games", json={"side": "both",
                                                "moves": [str(move) for move in moves],
                                                **FAST}).json()
        territory = board.territory()
        black, white = int((territory == 1).sum()), int((territory == -1).sum())
        assert state["turn"] == ("black", "white")[plies % 2] and black and white
        assert state["territory"] == {"owner": territory.tolist(), "black": black, "white": white,
                                      "balance": black - white}
        reply = random_game(14)[plies]
        state = client.post(f"/api/games/{state['id']}/move", json={"move": str(reply)}).json()
        board.push(reply)
        assert state["territory"]["owner"] == board.territory().tolist()


def test_continuing_a_recorded_game_to_its_end(client):
    moves = random_game(3)
    opening = [str(move) for move in moves[:-3]]
    state = client.post("/api/games", json={"side": "both", "moves": opening, **FAST}).json()
    assert state["ply"] == len(opening) and state["opening"] == len(opening)
    for move in moves[-3:]:
        state = client.post(f"/api/games/{state['id']}/move",
                            json={"move": move.to_botzone()}).json()
    assert state["over"] and state["legal"] is None
    assert state["winner"] == ("black", "white")[(len(moves) - 1) % 2]
    answer = client.post(f"/api/games/{state['id']}/move", json={"move": "c8-c6/d7"})
    assert answer.status_code == 409 and "the game is over" in answer.json()["error"]
    answer = client.post(f"/api/games/{state['id']}/analyse", json={})
    assert answer.status_code == 409 and "nothing to analyse" in answer.json()["error"]
    state = wait_idle(client, state["id"])
    record = read_records(state["saved"])[0]
    assert record.moves == moves and record.headers["Opening"] == str(len(opening))
    assert record.result == state["result"] != "*"


def test_record_files_for_replay(client, tmp_path):
    games = [random_game(5), random_game(6)]
    path = tmp_path / "two.txt"
    write_records(path, [GameRecord.from_game(moves, "random", "random", event="test")
                         for moves in games])
    listing = client.post("/api/records", json={"path": str(path)}).json()
    assert listing["count"] == 2
    assert [(game["game"], game["plies"]) for game in listing["games"]] == \
           [(1, len(games[0])), (2, len(games[1]))]
    view = client.post("/api/records", json={"path": str(path), "game": 2}).json()["game"]
    board = Board()
    assert view["boards"][0] == board_squares(board)
    for ply, move in enumerate(games[1], start=1):
        board.push(move)
        assert view["boards"][ply] == board_squares(board)
        assert view["moves"][ply - 1]["botzone"] == move.to_botzone()
        assert view["territories"][ply]["owner"] == board.territory().tolist()
    assert view["over"] and view["result"] == ("1-0", "0-1")[(len(games[1]) - 1) % 2]
    uploaded = client.post("/api/records", json={"text": path.read_text(), "game": 2}).json()
    assert uploaded["game"] == view and uploaded["source"] == "<uploaded text>"

    corrupt = tmp_path / "corrupt.txt"
    corrupt.write_text('[Event "x"]\n2 0 2 2 3 1\n2 0 2 2 3 1\n')
    for body, status, message in [
        ({"path": str(tmp_path / "missing.txt")}, 404, "does not exist"),
        ({"path": str(tmp_path)}, 400, "is not a file"),
        ({"path": str(corrupt)}, 400,
         "corrupt.txt:3: '2 0 2 2 3 1' (game 1): move 2: illegal move"),
        ({"path": str(path), "game": 3}, 400, "game 3 is not in"),
        ({"path": str(path), "text": "x"}, 400, "either 'path'"),
        ({}, 400, "either 'path'"),
        ({"text": "[Result \"2-0\"]"}, 400, 'Result must be "1-0", "0-1" or "*"'),
    ]:
        answer = client.post("/api/records", json=body)
        assert answer.status_code == status and message in answer.json()["error"], body


def test_record_files_are_read_only_where_the_board_serves_them(tmp_path, monkeypatch):
    # The board serves the record files inside the folders it was started with (--records,
    # --games-dir, --run, --models) and its --replay file, paths read as the server reads them
    # (relative to its working folder) and made real: a `..` that stays inside, or a link to a
    # served file, is served; a path outside, a `..` climbing out, a link pointing out, are
    # refused in the same words whether or not a file is there. Uploaded text is not a path.
    monkeypatch.chdir(tmp_path)
    kept, games, run, models, outside = (tmp_path / name for name in
                                         ("kept", "games", "run", "models", "outside"))
    for folder in (kept, games, run / "games", models, outside):
        folder.mkdir(parents=True)
    record = [GameRecord.from_game(random_game(5), "random", "random", event="test")]
    served = [kept / "a.txt", games / "web-1.txt", run / "games" / "selfplay.txt",
              models / "notes.txt", outside / "replay.txt"]
    for path in (*served, outside / "secret.txt"):
        write_records(path, record)
    (kept / "link-in.txt").symlink_to(games / "web-1.txt")
    (kept / "link-out.txt").symlink_to(outside / "secret.txt")
    app = create_app(WebConfig(model="none", games_dir=Path("games"), record_dirs=(kept,),
                               run_dir="run", model_dirs=(models,),
                               replay=str(outside / "replay.txt"), warm_up=False))
    with TestClient(app) as client:
        assert client.get("/api/info").json()["record_dirs"] == \
            [str(kept), "games", "run", str(models)]
        for path in (*map(str, served), "games/web-1.txt", str(kept / "link-in.txt"),
                     f"{kept}/../games/web-1.txt"):
            answer = client.post("/api/records", json={"path": path, "game": 1})
            assert answer.status_code == 200, (path, answer.json())
            assert answer.json()["count"] == 1 and answer.json()["source"] == path
        refusals = {}
        for path in (str(outside / "secret.txt"), str(outside / "missing.txt"), str(outside),
                     "outside/secret.txt", f"{kept}/../outside/secret.txt",
                     f"{kept}/../outside/missing.txt", "games/../outside/secret.txt",
                     str(kept / "link-out.txt"), "/etc/passwd", "/no/such/file.txt"):
            answer = client.post("/api/records", json={"path": path})
            assert answer.status_code == 400, (path, answer.json())
            refusals[path] = answer.json()["error"].replace(repr(path), "PATH")
        assert len(set(refusals.values())) == 1, refusals  # the same words for every path
        assert "PATH is not one this board serves" in next(iter(refusals.values()))
        missing = client.post("/api/records", json={"path": str(kept / "missing.txt")})
        assert missing.status_code == 404 and "does not exist" in missing.json()["error"]
        text = (outside / "secret.txt").read_text()
        assert client.post("/api/records", json={"text": text}).json()["count"] == 1
    bare = create_app(WebConfig(model="none", games_dir=None, warm_up=False))
    with TestClient(bare) as client:
        answer = client.post("/api/records", json={"path": str(kept / "a.txt")})
        assert answer.status_code == 400
        assert "is not one this board serves" in answer.json()["error"]


def _write_run(run_dir: Path, games: list[list[Move]], iterations: int) -> None:
    """A run directory as `amazons.train` lays it out, with real games and metrics lines."""
    (run_dir / "games").mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps({"preset": "cpu", "iterations": 9}))
    records = [GameRecord.from_game(moves, "selfplay", "selfplay", event="selfplay", Actor="0")
               for moves in games]
    write_records(run_dir / "games" / "selfplay.txt", records, append=True)
    with (run_dir / "metrics.jsonl").open("a") as stream:
        for iteration in range(1, iterations + 1):
            stream.write(json.dumps({"iteration": iteration, "train/loss": 9.0 / iteration,
                                     "eval/elo": 50.0 * iteration}) + "\n")


def test_watching_a_run_directory_pushes_new_games_and_metrics(client, tmp_path):
    run_dir = tmp_path / "run"
    games = [random_game(seed) for seed in range(10, 20)]
    _write_run(run_dir, games[:9], iterations=1)
    snapshot = client.get("/api/runs", params={"dir": str(run_dir)}).json()
    assert snapshot["games_total"] == 9 and snapshot["preset"] == "cpu" \
        and snapshot["iteration"] == 1
    # newest first
    assert [game["game"] for game in snapshot["games"]] == [9, 8, 7, 6, 5, 4, 3, 2]
    assert snapshot["games"][0]["moves"][0]["botzone"] == games[8][0].to_botzone()
    assert snapshot["metrics"] == [{"iteration": 1.0, "train/loss": 9.0, "eval/elo": 50.0}]
    with client.websocket_connect(f"/api/runs/ws?dir={run_dir}") as socket:
        first = socket.receive_json()["run"]
        assert first["games_total"] == 9
        with (run_dir / "metrics.jsonl").open("a") as stream:
            stream.write('{"iteration": 2, "train/lo')  # a line still being written
        write_records(run_dir / "games" / "selfplay.txt",
                      [GameRecord.from_game(games[9], "selfplay", "selfplay", event="selfplay")],
                      append=True)
        update = socket.receive_json()["run"]
        assert update["games_total"] == 10 and update["games"][0]["game"] == 10
        assert len(update["games"][0]["boards"]) == len(games[9]) + 1
        assert len(update["metrics"]) == 1  # the unfinished line waits
        with (run_dir / "metrics.jsonl").open("a") as stream:
            stream.write('ss": 4.5}\n')
        update = socket.receive_json()["run"]
        assert [row["iteration"] for row in update["metrics"]] == [1.0, 2.0]
    answer = client.get("/api/runs")
    assert answer.status_code == 400 and "'dir'" in answer.json()["error"]


def test_only_the_boards_run_directory_is_watched(tmp_path):
    # The watch view follows the board's --run folder and no other: the same folder named
    # through a link or a `..` is it; another run, a `..` climbing out, a link inside it that
    # points out, a folder inside it, are refused over HTTP and the websocket alike, in the same
    # words whether or not a folder is there (400; the websocket closes with 4400).
    run, other = tmp_path / "run", tmp_path / "other"
    for folder in (run, other):
        _write_run(folder, [random_game(10)], iterations=1)
    (run / "link-out").symlink_to(other, target_is_directory=True)
    (tmp_path / "alias").symlink_to(run, target_is_directory=True)
    app = create_app(WebConfig(model="none", games_dir=None, run_dir=str(run), warm_up=False,
                               poll_seconds=0.05))
    with TestClient(app) as client:
        for path in (str(run), str(tmp_path / "alias"), f"{other}/../run"):
            answer = client.get("/api/runs", params={"dir": path})
            assert answer.status_code == 200 and answer.json()["games_total"] == 1, path
            with client.websocket_connect(f"/api/runs/ws?{urlencode({'dir': path})}") as socket:
                assert socket.receive_json()["run"]["games_total"] == 1
        refusals = {}
        for path in (str(other), str(tmp_path / "missing"), f"{run}/../other",
                     f"{run}/../missing", str(run / "link-out"), str(run / "games"), "/etc", "/"):
            answer = client.get("/api/runs", params={"dir": path})
            assert answer.status_code == 400, (path, answer.json())
            refusals[path] = answer.json()["error"].replace(repr(path), "DIR")
            with client.websocket_connect(f"/api/runs/ws?{urlencode({'dir': path})}") as socket:
                assert socket.receive_json() == {"type": "error", "status": 400,
                                                 "error": answer.json()["error"]}
                with pytest.raises(WebSocketDisconnect) as closed:
                    socket.receive_json()
                assert closed.value.code == 4400
        assert len(set(refusals.values())) == 1, refusals  # the same words for every path
        assert "DIR is not one this board serves" in next(iter(refusals.values()))
    bare = create_app(WebConfig(model="none", games_dir=None, warm_up=False))
    with TestClient(bare) as client:
        answer = client.get("/api/runs", params={"dir": str(run)})
        assert answer.status_code == 400
        assert "is not one this board serves" in answer.json()["error"]


@pytest.mark.slow
def test_watching_a_real_training_run(client, tmp_path):
    """`python -m amazons.train` (two tiny iterations) writes the run the watch view follows."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    smoke = ["games_per_iteration=4", "selfplay.num_actors=2", "selfplay.games_in_parallel=2",
             "selfplay.search.simulations=8", "selfplay.start_jitter_s=0", "min_steps=3",
             "max_steps=3", "train_batch_size=32", "eval.games=2", "eval.simulations=4",
             "eval.processes=1", "eval.opponents=previous,random", "replay_chunk_games=1"]
    command = [sys.executable, "-m", "amazons.train", "--preset", "cpu", "--run-dir", str(run_dir),
               "--iterations", "2", "--no-progress", *smoke]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    seen_totals = set()
    try:
        while process.poll() is None:
            snapshot = client.get("/api/runs", params={"dir": str(run_dir)}).json()
            seen_totals.add(snapshot["games_total"])
            time.sleep(0.3)
        output = process.stdout.read()
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, output
    snapshot = client.get("/api/runs", params={"dir": str(run_dir)}).json()
    # The last iteration plays out the games the actors had begun: up to 2 x 2 in progress when
    # they read the wind-down, after up to 2 x 2 more that finished (and freed a lane for a new
    # game) between the 8th game and that read. The view counts every record the run wrote.
    total = snapshot["games_total"]
    records = read_records(run_dir / "games" / "selfplay.txt")
    assert total == len(records) and 8 <= total <= 16
    assert snapshot["iteration"] == 2 and snapshot["iterations"] == 2
    assert 0 in seen_totals and seen_totals & set(range(1, total))  # games showed up as they came
    assert [row["iteration"] for row in snapshot["metrics"]] == [1.0, 2.0]
    assert "train/loss" in snapshot["metrics"][0] and "eval/elo" in snapshot["metrics"][1]
    assert snapshot["ratings"]["random"] == 0 and snapshot["models"] == 3
    newest = records[-1]
    assert snapshot["games"][0]["game"] == total
    assert [move["botzone"] for move in snapshot["games"][0]["moves"]] == \
           [move.to_botzone() for move in newest.moves]


def test_the_page_and_its_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and '<script type="module" src="/static/main.js">' in page.text
    for name in ("main.js", "play.js", "board.js", "replay.js", "watch.js", "plot.js", "api.js",
                 "style.css", "icon.svg"):
        assert client.get(f"/static/{name}").status_code == 200, name
    info = client.get("/api/info").json()
    assert info["model"] == "none" and info["time_per_move"] == 1.0


def test_the_web_board_sits_on_top_of_the_import_chain():
    """Nothing in the package imports `amazons.web`; importing the package loads no web stack."""
    for path in (ROOT / "amazons").rglob("*.py"):
        if "web" not in path.relative_to(ROOT / "amazons").parts:
            text = path.read_text()
            assert "amazons.web" not in text and "from amazons import web" not in text, path
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, amazons; print(sorted(name for name in sys.modules "
         "if name.split('.')[0] in ('starlette', 'uvicorn') or name == 'amazons.web'))"],
        cwd=ROOT, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"


def test_the_oldest_idle_game_makes_room(tmp_path):
    app = create_app(WebConfig(model="none", games_dir=None, warm_up=False, max_games=2))
    with TestClient(app) as client:
        games = [client.post("/api/games", json={"side": "both", **FAST}).json()["id"]
                 for _ in range(2)]
        client.post(f"/api/games/{games[0]}/move", json={"move": "c8-c6/d7"})  # used last
        newest = client.post("/api/games", json={"side": "both", **FAST}).json()["id"]
        assert sorted(game["id"] for game in client.get("/api/games").json()) == \
               sorted([games[0], newest])
        assert client.get(f"/api/games/{games[1]}").json() == \
               {"error": f"unknown game {games[1]!r}"}


@pytest.mark.parametrize(("argv", "message"), [
    (["--port", "0"], "--port must be in 1..65535"),
    (["--time", "-2"], "--time must be in"),
    (["--run", "/no/such/run"], "--run /no/such/run: no such folder"),
    (["--replay", "/no/such/file.txt"], "no such file"),
    (["--models", "/no/such/models"], "--models /no/such/models: no such folder"),
    (["--records", "/no/such/records"], "--records /no/such/records: no such folder"),
    (["--games-dir", "g", "--no-save"], "not allowed with argument"),
])
def test_bad_command_lines_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        web_main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err
