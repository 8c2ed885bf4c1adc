"""JSON views of boards, moves, searches and game records for the browser.

The browser never applies rules: it draws what these views say. A board of `N x N` squares is
`N * N` characters in square order (square = y * N + x, the top left first: `a8` on 8x8, `a10`
on 10x10): `B` a Black amazon, `W` a White one, `x` an arrow, `.` empty; its length gives the
size. Which board a game is played on is `board_view`: `BoardSpec.to_dict()` (name, size, start
squares, the side that moves first). Legal moves come as a tree `{src: {dst: [arrows]}}` of square
indices, which is all the click-to-move board needs to highlight targets, and the territory
overlay comes as the `N * N` values of `Board.territory()`. Imports `board`, `boards`, `mcts`,
`players` and `records`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amazons.board import BLACK, COLOR_NAMES, Board, Move
from amazons.boards import BoardSpec
from amazons.mcts import SearchResult
from amazons.players.player import SearchReport
from amazons.players.records import GameRecord
from amazons.symmetry import canonical_to_real

__all__ = [
    "analysis_view",
    "board_squares",
    "board_view",
    "legal_move_tree",
    "move_view",
    "record_summary",
    "record_view",
    "territory_view",
]

TOP_MOVES = 10  # root moves an analysis lists


def board_squares(board: Board) -> str:
    """The `N * N`-character board (`B`, `W`, `x`, `.`), square 0 (the top left) first."""
    black, white, arrows = board.bitboards()
    cells = []
    for square in range(board.num_squares):
        bit = 1 << square
        cells.append("B" if black & bit else "W" if white & bit else "x" if arrows & bit else ".")
    return "".join(cells)


def territory_view(board: Board) -> dict[str, Any]:
    """Queen-distance ownership of `board` for the territory overlay.

    Returns:
        `owner`: the `N * N` values of `Board.territory()` in square order: +1 where
        Black's nearest amazon is strictly closer in queen moves through empty squares, -1 where
        White's is, 0 on ties, unreachable squares, amazons and arrows; `black` and `white`: the
        squares each owns; `balance`: `black - white`.
    """
    owner = board.territory()
    black, white = int((owner > 0).sum()), int((owner < 0).sum())
    return {"owner": owner.tolist(), "black": black, "white": white, "balance": black - white}


def board_view(spec: BoardSpec) -> dict[str, Any]:
    """The board a game is played on: `{"name", "size", "black", "white", "first"}`
    (`BoardSpec.to_dict()`; `name` is "" for a start given as a position string) and `label`,
    its name or its start position string."""
    return {**spec.to_dict(), "label": spec.label()}


def move_view(move: Move) -> dict[str, Any]:
    """`{"algebraic": "d8-d4/f6", "botzone": "3 0 3 4 5 2", "squares": [src, dst, arrow]}`."""
    return {"algebraic": str(move), "botzone": move.to_botzone(), "squares": list(move.as_tuple())}


def legal_move_tree(board: Board) -> dict[str, dict[str, list[int]]]:
    """The side to move's legal moves as `{src: {dst: [arrow, ...]}}` (JSON keys are strings)."""
    tree: dict[str, dict[str, list[int]]] = {}
    for src, dst, arrow in board.legal_move_array().tolist():
        tree.setdefault(str(src), {}).setdefault(str(dst), []).append(arrow)
    return tree


def analysis_view(result: SearchResult, report: SearchReport, board: Board, kind: str,
                  seconds: float) -> dict[str, Any]:
    """What one search found at `board`, for the analysis panel.

    Args:
        result: the search's root statistics (canonical moves, in the search's order of
            preference: proven wins, then by visits, then proven losses).
        report: the searching player's report of the same search (its real-frame main line).
        board: the searched position.
        kind: `"ai-move"` (the search behind an AI move) or `"analysis"` (asked for).
        seconds: how long the search took.

    Returns:
        ply, turn, value for the side to move and for Black, the proof status of the root
        (`proven`: +1 the side to move wins, -1 it loses, 0 unknown; `proof_plies`; `winner`
        when proven), the top moves that were visited or proven (share of visits, visits, Q for
        the side to move, prior, `proof` and `proof_plies`), the principal variation,
        simulations, seconds and the number of legal moves.
    """
    shown = np.flatnonzero((result.visits > 0) | (result.move_proofs != 0))[:TOP_MOVES]
    real_moves = (canonical_to_real(result.moves[shown], board.turn, board.size)
                  if shown.size else [])
    shares = result.policy
    top = []
    for index, squares in zip(shown.tolist(), np.asarray(real_moves).tolist(), strict=True):
        entry = move_view(Move(*squares, size=board.size))
        q = float(result.q_values[index])
        entry.update(share=float(shares[index]), visits=int(result.visits[index]),
                     q=q if np.isfinite(q) else None, prior=float(result.priors[index]),
                     proof=int(result.move_proofs[index]),
                     proof_plies=int(result.move_proof_plies[index]))
        top.append(entry)
    value = float(np.clip(result.root_value, -1.0, 1.0))
    proven = int(result.proven)
    winner = None if not proven else COLOR_NAMES[board.turn if proven > 0 else 1 - board.turn]
    return {
        "kind": kind,
        "ply": board.ply,
        "turn": COLOR_NAMES[board.turn],
        "squares": board_squares(board),
        "value": value,
        "black_value": value if board.turn == BLACK else -value,
        "proven": proven,
        "proof_plies": int(result.proof_plies) if proven else None,
        "winner": winner,
        "simulations": result.simulations,
        "seconds": round(seconds, 3),
        "legal_moves": int(result.num_legal_moves),
        "top": top,
        "pv": [move_view(move) for move in report.principal_variation],
    }


def record_summary(record: GameRecord, number: int) -> dict[str, Any]:
    """A game's number (from 1), its board (`board_view`), headers, players, result and length,
    without its moves.

    Raises:
        amazons.boards.NotationError: the record's `Board` header names no board.
    """
    return {
        "game": number,
        "board": board_view(record.start),
        "headers": dict(record.headers),
        "black": record.black,
        "white": record.white,
        "result": record.result,
        "plies": len(record.moves),
    }


def record_view(record: GameRecord, number: int) -> dict[str, Any]:
    """A game for replay: its summary, its moves, and the board and territory after every ply.

    `boards[i]` is the position after `i` moves (`boards[0]` the start) and `territories[i]` its
    `territory_view`, so a replay steps and jumps without rules in the browser; `over` says
    whether the last position ends the game. The board is the record's (`GameRecord.start`).
    """
    board = Board(start=record.start)
    boards = [board_squares(board)]
    territories = [territory_view(board)]
    for move in record.moves:
        board.push(move)
        boards.append(board_squares(board))
        territories.append(territory_view(board))
    view = record_summary(record, number)
    view.update(moves=[move_view(move) for move in record.moves], boards=boards,
                territories=territories, over=board.is_game_over())
    return view
