"""JSON views of boards, moves, searches and game records for the browser.

The browser never applies rules: it draws what these views say. A board is 64 characters in
square order (square = y * 8 + x, `a8` first, `h1` last): `B` a Black amazon, `W` a White one,
`x` an arrow, `.` empty. Legal moves come as a tree `{src: {dst: [arrows]}}` of square indices,
which is all the click-to-move board needs to highlight targets. Imports `board`, `mcts`,
`players` and `records`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amazons.board import BLACK, COLOR_NAMES, Board, Move
from amazons.mcts import SearchResult
from amazons.players import SearchReport
from amazons.records import GameRecord

__all__ = [
    "analysis_view",
    "board_squares",
    "legal_move_tree",
    "move_view",
    "record_summary",
    "record_view",
]

TOP_MOVES = 10  # root moves an analysis lists


def board_squares(board: Board) -> str:
    """The 64-character board (`B`, `W`, `x`, `.`), square 0 (`a8`) first."""
    black, white, arrows = board.bitboards()
    cells = []
    for square in range(64):
        bit = 1 << square
        cells.append("B" if black & bit else "W" if white & bit else "x" if arrows & bit else ".")
    return "".join(cells)


def move_view(move: Move) -> dict[str, Any]:
    """`{"algebraic": "d8-d4/f6", "botzone": "3 0 3 4 5 2", "squares": [src, dst, arrow]}`."""
    return {"algebraic": str(move), "botzone": move.to_botzone(), "squares": list(move.as_tuple())}


def legal_move_tree(board: Board) -> dict[str, dict[str, list[int]]]:
    """The side to move's legal moves as `{src: {dst: [arrow, ...]}}` (JSON keys are strings)."""
    tree: dict[str, dict[str, list[int]]] = {}
    for src, dst, arrow in board.legal_move_array().tolist():
        tree.setdefault(str(src), {}).setdefault(str(dst), []).append(arrow)
    return tree


def analysis_view(report: SearchReport, result: SearchResult, board: Board, kind: str,
                  seconds: float) -> dict[str, Any]:
    """What one search found at `board`, for the analysis panel.

    Args:
        report: the searching player's report (real-frame moves, shares, values, main line).
        result: the same search's root statistics (visits, priors, legal move count).
        board: the searched position.
        kind: `"ai-move"` (the search behind an AI move) or `"analysis"` (asked for).
        seconds: how long the search took.

    Returns:
        ply, turn, value for the side to move and for Black, the top moves (share of visits,
        visits, Q for the side to move, prior), the principal variation, simulations, seconds,
        and the proof status of the root when the search reports one.
    """
    top = []
    count = min(TOP_MOVES, len(report.moves))
    for index in range(count):
        entry = move_view(report.moves[index])
        entry.update(share=float(report.visit_shares[index]), visits=int(result.visits[index]),
                     q=float(report.q_values[index]), prior=float(result.priors[index]))
        top.append(entry)
    value = float(np.clip(report.root_value, -1.0, 1.0))
    view: dict[str, Any] = {
        "kind": kind,
        "ply": board.ply,
        "turn": COLOR_NAMES[board.turn],
        "squares": board_squares(board),
        "value": value,
        "black_value": value if board.turn == BLACK else -value,
        "simulations": report.simulations,
        "seconds": round(seconds, 3),
        "legal_moves": int(result.num_legal_moves),
        "top": top,
        "pv": [move_view(move) for move in report.principal_variation],
    }
    return view


def record_summary(record: GameRecord, number: int) -> dict[str, Any]:
    """A game's number (from 1), headers, players, result and length, without its moves."""
    return {
        "game": number,
        "headers": dict(record.headers),
        "black": record.black,
        "white": record.white,
        "result": record.result,
        "plies": len(record.moves),
    }


def record_view(record: GameRecord, number: int) -> dict[str, Any]:
    """A game for replay: its summary, its moves, and the board after every ply.

    `boards[i]` is the position after `i` moves (`boards[0]` the start), so a replay steps and
    jumps without rules in the browser; `over` says whether the last position ends the game.
    """
    board = Board()
    boards = [board_squares(board)]
    for move in record.moves:
        board.push(move)
        boards.append(board_squares(board))
    view = record_summary(record, number)
    view.update(moves=[move_view(move) for move in record.moves], boards=boards,
                over=board.is_game_over())
    return view
