"""Engine benchmarks: perft, move enumeration, feature planes and push/pop, against two peers.

Every figure is measured in the same run on the same positions for the engine, for the
pure-Python oracle of `tests/oracle.py`, and, when `open-spiel` is installed, for OpenSpiel's
`amazons` (board_size 8) driven from Python. Positions: the Botzone start, and mid-game positions
reached by seeded uniformly random playouts to ply 20. Everything runs on one core.

Timing on a shared machine: every side's work comes in short pieces (one batch call, one
position, one board), clocked a few times in a row in each of several interleaved rounds; each
piece keeps its fastest time. A rate is units over the sum of those times (what one undisturbed
core does), and a speedup is the ratio of two rates found the same way over the same stretch of
time.

Metric names (`engine.<what>`), all "higher is better" except `engine.perft3_s`:
* `perft3_s`, `perft3_leaf_moves_per_s`: perft(3) from the start (1,358,441,750 leaves); the
  oracle's leaf rate comes from its perft(2) from the start (full expansion, no bulk counting).
* `movegen_{start,mid}_moves_per_s`: `engine.legal_moves` on a batch of 256 positions into
  caller-owned buffers (throughput; copies of the start, the mid-game positions four times over).
* `movegen_{start,mid}_distinct_moves_per_s`: the same call over the distinct positions only
  (the start alone; the mid-game positions once, in one call): what the speedups compare.
* `features{7,3}_positions_per_s`: `engine.features` on a batch of mid-game positions.
* `pushpop_per_s`: `Board.push` + `Board.pop` pairs, `Move` objects in, Python loop;
  `state_pushpop_per_s`: the same on the Cython `State` under `Board`, plain ints in.
* `adjudicate_{unseparated,separated}_positions_per_s`: `engine.adjudicate` on batches of
  positions from seeded uniformly random games: the ply-20 positions plus the late ones (ply 30
  on) whose amazons still share a region (the cheap test that every search leaf pays), and,
  apart, every late position whose amazons are separated (bounds and, where needed, the exact
  fill search). `adjudicate_separated_positions` counts the latter and
  `adjudicate_separated_decided_share` is the share of them that the bounds decide.
* `territory_positions_per_s`: `engine.territory` on a batch of the same mid and late positions.
* `standard10_*`: the standard 10x10 game: `standard10_perft2_s` and its leaf rate from the
  standard start (4,307,152 leaves), `standard10_movegen_mid_distinct_moves_per_s` on mid-game
  positions (ply 20 of seeded random games) and `standard10_speedup_vs_openspiel_cpp` against
  OpenSpiel's C++ `LegalActions` at board_size 10 on the same positions' decision states,
  `standard10_features7_positions_per_s`.
* `oracle_*`, `openspiel_*`: the peers' rates for the same work; `speedup_vs_oracle` and
  `speedup_vs_openspiel` are for mid-game move enumeration over the same distinct positions
  (`*_start` for the start), and `<task>_speedup_vs_<peer>` for the other tasks.
* `openspiel_cpp_*`, `speedup_vs_openspiel_cpp[_start]`: the anchor for OpenSpiel's own speed:
  full moves per second of its C++ `LegalActions` alone, called through pybind11 on the
  decision states of the same positions, built beforehand (Python has no faster path to it;
  `openspiel_*` is the full expansion as a Python program drives it: one state copy per
  decision, `child` and `legal_actions` per node).

Run it through the runner: `python benchmarks/run.py --suite engine [--quick] [--json PATH]`.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _path in (REPO, REPO / "tests"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import oracle  # noqa: E402  (tests/oracle.py, found through the path above)

from amazons import Board, Move, _engine, engine  # noqa: E402

MID_PLY = 20
MID_POSITIONS = 64
LATE_PLY = 30  # adjudication's late-game set: positions from this ply on
LATE_GAMES = 160  # seeded random games played to the end for it
BATCH = 256  # positions per batch call: a search's leaf batch; the output stays in cache
BURST = 3  # consecutive clocks of each piece per round
PERFT2_LEAVES = 1_331_198
PERFT3_LEAVES = 1_358_441_750

try:
    import pyspiel
except ImportError:  # the `bench` extra is optional
    pyspiel = None
_LEGAL_ACTIONS = pyspiel.State.legal_actions if pyspiel is not None else None

Work = tuple[list[Callable[[], object]], float]  # (short pieces of the work, units they handle)


def clock(work: Callable[[], object]) -> float:
    """Wall time of one call of `work`, in seconds."""
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def compare(ours: Work, peers: dict[str, Work],
            rounds: int) -> tuple[float, dict[str, float], dict[str, float]]:
    """Rates of the engine and its peers on the same work, timed in interleaved rounds.

    Each side's work comes in short pieces (one batch call, one position, one board). Every
    round clocks every piece of every side `BURST` times in a row (so caches are warm for every
    side alike); a piece's time is its fastest over the rounds,
    and a side's rate is its units over the sum of its pieces' times: what one undisturbed core
    does, found the same way for every side over the same stretch of time.

    Args:
        ours: the engine's `(pieces, units)`.
        peers: `{name: (pieces, units)}` for the same work done by each peer.
        rounds: number of rounds (after one untimed warm-up call of each piece).

    Returns:
        `(our rate, {peer: rate}, {peer: our rate / its rate})`.
    """
    sides = {"ours": ours, **peers}
    for pieces, _ in sides.values():
        for piece in pieces:
            piece()
    best = {name: [float("inf")] * len(pieces) for name, (pieces, _) in sides.items()}
    for _ in range(rounds):
        for name, (pieces, _) in sides.items():
            for index, piece in enumerate(pieces):
                best[name][index] = min(best[name][index], *(clock(piece) for _ in range(BURST)))
    rates = {name: units / sum(best[name]) for name, (_, units) in sides.items()}
    return (rates["ours"], {name: rates[name] for name in peers},
            {name: rates["ours"] / rates[name] for name in peers})


def record(metrics: dict[str, float], task: str, units: str, result: tuple,
           headline: dict[str, str]) -> None:
    """Store `compare`'s result as `engine.<task>_<units>`, `engine.<peer>_<task>_<units>`
    and speedups."""
    our_rate, peer_rates, speedups = result
    metrics[f"engine.{task}_{units}"] = our_rate
    for name, rate in peer_rates.items():
        metrics[f"engine.{name}_{task}_{units}"] = rate
    for name, speedup in speedups.items():
        metrics[headline.get(name, f"engine.{task}_speedup_vs_{name}")] = speedup


def mid_game_lines(count: int, seed: int = 2024) -> list[list[Move]]:
    """Move lists of `count` seeded uniformly random games, each stopped at ply `MID_PLY`."""
    lines = []
    rng = random.Random(seed)
    while len(lines) < count:
        board, line = Board(), []
        while board.ply < MID_PLY and not board.is_game_over():
            moves = board.legal_move_array()
            move = Move(*moves[rng.randrange(len(moves))].tolist())
            board.push(move)
            line.append(move)
        if board.ply == MID_PLY and not board.is_game_over():
            lines.append(line)
    return lines


def late_game_positions(games: int, seed: int = 2025) -> np.ndarray:
    """Canonical positions from ply `LATE_PLY` on of `games` seeded uniformly random games,
    `(N, 3) uint64`."""
    positions = []
    rng = random.Random(seed)
    for _ in range(games):
        board = Board()
        while not board.is_game_over():
            moves = board.legal_move_array()
            board.push(Move(*moves[rng.randrange(len(moves))].tolist()))
            if board.ply >= LATE_PLY:
                positions.append(board.canonical_position())
    return np.stack(positions)


def adjudication_metrics(mid: np.ndarray, games: int, rounds: int) -> dict[str, float]:
    """Rates of `engine.adjudicate` (separated and not, apart) and of `engine.territory`."""
    late = late_game_positions(games)
    _, bounds = engine.adjudicate(late)
    separated = bounds[:, engine.MY_LOWER] >= 0
    if not separated.any() or separated.all():
        raise RuntimeError("the late-game set needs both separated and unseparated positions")
    unseparated = np.concatenate([mid, late[~separated]])
    split = np.ascontiguousarray(late[separated])
    metrics = {"engine.adjudicate_separated_positions": float(len(split))}
    result, _ = engine.adjudicate(split)
    metrics["engine.adjudicate_separated_decided_share"] = float((result != 0).mean())
    for label, positions in (("unseparated", unseparated), ("separated", split)):
        out_result = np.empty(len(positions), dtype=np.int8)
        out_bounds = np.empty((len(positions), 4), dtype=np.int16)
        rate, _, _ = compare(
            (
                [lambda p=positions, r=out_result, b=out_bounds: engine.adjudicate(p, r, b)],
                len(positions),
            ),
            {},
            3 * rounds,
        )
        metrics[f"engine.adjudicate_{label}_positions_per_s"] = rate
    mixed = np.concatenate([mid, late])
    owned = np.empty((len(mixed), 64), dtype=np.int8)
    metrics["engine.territory_positions_per_s"] = compare(
        ([lambda: engine.territory(mixed, owned)], len(mixed)), {}, 3 * rounds
    )[0]
    return metrics


def oracle_position(board: Board) -> oracle.Position:
    """The oracle's real-frame position of a board."""
    black, white, arrows = board.bitboards()
    return oracle.Position(
        oracle.squares_of(black), oracle.squares_of(white), oracle.squares_of(arrows), board.turn
    )


# ---------------------------------------------------------------------------------------------
# OpenSpiel, driven the natural way from Python: from-square, to-square, arrow, one state each
# ---------------------------------------------------------------------------------------------

def openspiel_cell(square: int) -> int:
    """OpenSpiel cell of a Botzone square: `(x, y)` -> `(7 - y) * 8 + x`."""
    return (7 - square // 8) * 8 + square % 8


def openspiel_square(cell: int) -> int:
    """Botzone square of an OpenSpiel cell."""
    return (7 - cell // 8) * 8 + cell % 8


def openspiel_state(game, line: list[Move]):
    """The OpenSpiel state after a line of moves from the start."""
    state = game.new_initial_state()
    for move in line:
        for square in move.as_tuple():
            state.apply_action(openspiel_cell(square))
    return state


def openspiel_count_moves(state) -> int:
    """Number of full moves, by expanding from-square, then to-square, then listing arrows."""
    total = 0
    for source in state.legal_actions():
        picked = state.child(source)
        for destination in picked.legal_actions():
            total += len(picked.child(destination).legal_actions())
    return total


def openspiel_move_set(state) -> set[tuple[int, int, int]]:
    """Full moves of a state as Botzone `(src, dst, arrow)` squares."""
    moves = set()
    for source in state.legal_actions():
        picked = state.child(source)
        for destination in picked.legal_actions():
            for arrow in picked.child(destination).legal_actions():
                moves.add((openspiel_square(source), openspiel_square(destination),
                           openspiel_square(arrow)))
    return moves


def openspiel_decision_states(state) -> list:
    """Every decision state a full-move expansion of `state` asks for its legal actions: the state
    itself (which amazon), each amazon picked (where to), each landing (where to shoot)."""
    states = [state]
    for source in state.legal_actions():
        picked = state.child(source)
        states.append(picked)
        states.extend(picked.child(destination) for destination in picked.legal_actions())
    return states


def openspiel_legal_actions(states: list) -> list:
    """OpenSpiel's C++ `LegalActions` on every state, by the shortest path Python has to it."""
    return list(map(_LEGAL_ACTIONS, states))


def openspiel_apply_undo(state, moves: list[tuple[int, int, int]]) -> None:
    """OpenSpiel's push/pop: apply the three actions of each move, then undo them."""
    player = state.current_player()
    for source, destination, arrow in moves:
        state.apply_action(source)
        state.apply_action(destination)
        state.apply_action(arrow)
        state.undo_action(player, arrow)
        state.undo_action(player, destination)
        state.undo_action(player, source)


# ---------------------------------------------------------------------------------------------
# the suite
# ---------------------------------------------------------------------------------------------

def run(quick: bool) -> dict[str, float]:
    """Measure the engine, the oracle and (if installed) OpenSpiel; return `engine.*` metrics."""
    rounds = 3 if quick else 15
    mid_count = MID_POSITIONS // 4 if quick else MID_POSITIONS
    metrics: dict[str, float] = {}

    start = engine.start_position()
    lines = mid_game_lines(mid_count)
    boards = [Board.from_moves(line) for line in lines]
    mid = np.stack([board.canonical_position() for board in boards])
    start_triple = oracle.Position().canonical()
    mid_triples = [oracle.triple_of(position) for position in mid]
    metrics["engine.mid_positions"] = float(mid_count)
    metrics["engine.mid_mean_legal_moves"] = float(engine.count_legal_moves(mid).mean())

    game = pyspiel.load_game("amazons", {"board_size": 8}) if pyspiel is not None else None
    start_state, mid_states = None, []
    if game is not None:
        start_state = game.new_initial_state()
        mid_states = [openspiel_state(game, line) for line in lines]
        mismatches = sum(
            openspiel_move_set(state) != {tuple(row) for row in board.legal_move_array().tolist()}
            for state, board in zip([start_state, *mid_states], [Board(), *boards], strict=True)
        )
        metrics["engine.openspiel_move_set_mismatches"] = float(mismatches)

    # perft(3) from the start; the oracle's perft(2) from the start, as one child per first move.
    metrics["engine.perft3_s"] = min(
        clock(lambda: engine.perft_position(start, 3)) for _ in range(1 if quick else 3)
    )
    metrics["engine.perft3_leaf_moves_per_s"] = PERFT3_LEAVES / metrics["engine.perft3_s"]
    mine, theirs, arrows = start_triple
    children = []  # (side to move, the other side, arrows) after each first move
    for move in oracle.legal_moves(mine, theirs, arrows):
        new_mine, new_arrows = oracle.play_move(mine, theirs, arrows, move)
        children.append((theirs, new_mine, new_arrows))
    oracle_seconds = sum(
        min(clock(lambda c=child: oracle.perft(*c, 1)) for _ in range(1 if quick else 2))
        for child in children
    )
    metrics["engine.oracle_perft2_leaf_moves_per_s"] = PERFT2_LEAVES / oracle_seconds
    metrics["engine.perft_speedup_vs_oracle"] = (
        metrics["engine.perft3_leaf_moves_per_s"] / metrics["engine.oracle_perft2_leaf_moves_per_s"]
    )

    # Move enumeration throughput of the batch API into caller-owned buffers, on a search-sized
    # batch of BATCH positions (copies of the start; the mid-game positions four times over).
    for label, positions in (("start", np.tile(start, (BATCH, 1))),
                             ("mid", np.tile(mid, (BATCH // mid_count, 1)))):
        total = int(engine.count_legal_moves(positions).sum())
        out_moves = np.empty((total, 3), dtype=np.int32)
        out_offsets = np.empty(len(positions) + 1, dtype=np.int64)
        seconds = min(
            clock(lambda p=positions, m=out_moves, o=out_offsets: engine.legal_moves(p, m, o))
            for _ in range(BURST * rounds)
        )
        metrics[f"engine.movegen_{label}_moves_per_s"] = total / seconds

    # Move enumeration through the batch API into caller-owned buffers, over the distinct
    # positions (the start alone; the mid-game positions in one call); the peers list the same
    # positions' moves one position at a time. `openspiel_cpp` is OpenSpiel's C++ LegalActions
    # alone: the decision states a full-move expansion needs are built beforehand, and the clock
    # runs over LegalActions calls only (no state copies, no Python loop around each call).
    for label, positions, triples, states in (
        ("start", start.reshape(1, 3), [start_triple], [start_state]),
        ("mid", mid, mid_triples, mid_states),
    ):
        total = int(engine.count_legal_moves(positions).sum())
        out_moves = np.empty((total, 3), dtype=np.int32)
        out_offsets = np.empty(len(positions) + 1, dtype=np.int64)
        peers = {
            "oracle": (
                [lambda t=triple: oracle.legal_moves(*t) for triple in triples],
                sum(len(oracle.legal_moves(*triple)) for triple in triples),
            )
        }
        if game is not None:
            peers["openspiel"] = (
                [lambda s=state: openspiel_count_moves(s) for state in states],
                sum(openspiel_count_moves(state) for state in states),
            )
            decisions = [openspiel_decision_states(state) for state in states]
            peers["openspiel_cpp"] = (
                [partial(openspiel_legal_actions, group) for group in decisions],
                sum(openspiel_count_moves(state) for state in states),
            )
        result = compare(
            ([lambda p=positions, m=out_moves, o=out_offsets: engine.legal_moves(p, m, o)], total),
            peers,
            rounds,
        )
        suffix = "" if label == "mid" else "_start"
        record(metrics, f"movegen_{label}_distinct", "moves_per_s", result,
               {name: f"engine.speedup_vs_{name}{suffix}" for name in peers})

    # Feature planes, batched; the oracle's naive planes and OpenSpiel's observation tensor (its
    # nearest thing: 4 planes, no mobility) one position at a time.
    feature_batch = np.tile(mid, ((4 * BATCH) // mid_count, 1))
    three_planes = np.empty((len(feature_batch), 3, 8, 8), dtype=np.float32)
    seven_planes = np.empty((len(feature_batch), 7, 8, 8), dtype=np.float32)
    metrics["engine.features3_positions_per_s"] = len(feature_batch) / min(
        clock(lambda: engine.features(feature_batch, 3, three_planes)) for _ in range(3 * rounds)
    )
    peers = {
        "oracle": (
            [lambda t=triple: oracle.feature_planes(*t) for triple in mid_triples],
            len(mid_triples),
        ),
    }
    if game is not None:
        peers["openspiel_observation"] = (
            [lambda s=state: s.observation_tensor() for state in mid_states],
            len(mid_states),
        )
    result = compare(
        ([lambda: engine.features(feature_batch, 7, seven_planes)], len(feature_batch)),
        peers,
        rounds,
    )
    record(metrics, "features7", "positions_per_s", result, {})

    # push/pop over every legal move of a few mid-game positions: the Python Board, the Cython
    # State under it (plain ints), the oracle's checked move to a new position, OpenSpiel's
    # apply and undo of three actions.
    push_boards = boards[:8]
    push_moves = [board.legal_moves() for board in push_boards]
    pushes = sum(len(moves) for moves in push_moves)

    def board_push_pop(board: Board, moves: list[Move]) -> None:
        for move in moves:
            board.push(move)
            board.pop()

    def state_push_pop(state: _engine.State, moves: list[tuple[int, int, int]]) -> None:
        for src, dst, arrow in moves:
            state.push(src, dst, arrow)
            state.pop()

    def oracle_play(position: oracle.Position, moves: list[oracle.Move]) -> None:
        for move in moves:
            position.play(move)

    int_moves = [[move.as_tuple() for move in moves] for moves in push_moves]
    states = []
    for board in push_boards:
        state = _engine.State()
        state.set_position(*board.bitboards(), board.turn, board.ply)
        states.append(state)
    oracle_moves = [[oracle.move_from_indices(move) for move in moves] for moves in int_moves]
    peers = {
        "state": (
            [partial(state_push_pop, *pair) for pair in zip(states, int_moves, strict=True)],
            pushes,
        ),
        "oracle": (
            [
                partial(oracle_play, oracle_position(board), moves)
                for board, moves in zip(push_boards, oracle_moves, strict=True)
            ],
            pushes,
        ),
    }
    if game is not None:
        cell_moves = [
            [tuple(openspiel_cell(square) for square in move) for move in moves]
            for moves in int_moves
        ]
        peers["openspiel"] = (
            [
                partial(openspiel_apply_undo, *pair)
                for pair in zip(mid_states[:8], cell_moves, strict=True)
            ],
            pushes,
        )
    ours = (
        [partial(board_push_pop, *pair) for pair in zip(push_boards, push_moves, strict=True)],
        pushes,
    )
    record(metrics, "pushpop", "per_s", compare(ours, peers, rounds), {})
    metrics.pop("engine.pushpop_speedup_vs_state")

    metrics.update(adjudication_metrics(mid, LATE_GAMES // 4 if quick else LATE_GAMES, rounds))
    metrics.update(standard_game_metrics(mid_count, rounds, quick))
    return metrics


# ---------------------------------------------------------------------------------------------
# the standard 10x10 game
# ---------------------------------------------------------------------------------------------

def standard_mid_boards(count: int, seed: int = 2026) -> list[Board]:
    """`count` boards of seeded uniformly random 10x10 games from the standard start, each
    stopped at ply `MID_PLY`."""
    boards = []
    rng = random.Random(seed)
    while len(boards) < count:
        board = Board(start="standard10")
        while board.ply < MID_PLY and not board.is_game_over():
            moves = board.legal_move_array()
            board.push(Move(*moves[rng.randrange(len(moves))].tolist(), size=10))
        if board.ply == MID_PLY and not board.is_game_over():
            boards.append(board)
    return boards


def standard_game_metrics(count: int, rounds: int, quick: bool) -> dict[str, float]:
    """The 10x10 figures (`engine.standard10_*`): perft(2) from the standard start, move listing
    and feature planes on mid-game positions, and OpenSpiel's C++ `LegalActions` (board_size 10)
    on the same positions' decision states."""
    metrics: dict[str, float] = {}
    start = Board(start="standard10").canonical_position()
    leaves = engine.perft_position(start, 2, size=10)
    metrics["engine.standard10_perft2_s"] = min(
        clock(lambda: engine.perft_position(start, 2, size=10)) for _ in range(3 if quick else 9))
    metrics["engine.standard10_perft2_leaf_moves_per_s"] = (
        leaves / metrics["engine.standard10_perft2_s"])
    boards = standard_mid_boards(count)
    mid = np.stack([board.canonical_position() for board in boards])
    metrics["engine.standard10_mid_mean_legal_moves"] = float(
        engine.count_legal_moves(mid, size=10).mean())
    total = int(engine.count_legal_moves(mid, size=10).sum())
    out_moves = np.empty((total, 3), dtype=np.int32)
    out_offsets = np.empty(len(mid) + 1, dtype=np.int64)
    peers = {}
    if pyspiel is not None:
        game = pyspiel.load_game("amazons", {"board_size": 10})
        states = []
        for board in boards:
            state = game.new_initial_state()
            for move in board.move_stack:
                for square in move.as_tuple():  # the same squares: White first, at the bottom
                    state.apply_action(square)
            states.append(state)
        decisions = [openspiel_decision_states(state) for state in states]
        peers["openspiel_cpp"] = ([partial(openspiel_legal_actions, group) for group in decisions],
                                  sum(openspiel_count_moves(state) for state in states))
    result = compare(
        ([lambda: engine.legal_moves(mid, out_moves, out_offsets, size=10)], total), peers, rounds)
    record(metrics, "standard10_movegen_mid_distinct", "moves_per_s", result,
           {"openspiel_cpp": "engine.standard10_speedup_vs_openspiel_cpp"})
    feature_batch = np.tile(mid, ((4 * BATCH) // len(mid), 1))
    planes = np.empty((len(feature_batch), 7, 10, 10), dtype=np.float32)
    metrics["engine.standard10_features7_positions_per_s"] = len(feature_batch) / min(
        clock(lambda: engine.features(feature_batch, 7, planes, size=10))
        for _ in range(3 * rounds))
    return metrics
