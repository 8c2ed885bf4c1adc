"""The flat action encoding and the observations shared by the environments.

An action is one whole move, `(src, dst, arrow)`, as one integer in `0 .. NUM_ACTIONS - 1`. The
action space enumerates every move geometry of the 8x8 board: `dst` on a queen line from `src`,
`arrow` on a queen line from `dst` (on an empty board; the arrow may land on `src`). There are
1,456 queen lines (src, dst) and `sum(reach(d) ** 2)` = 33,344 triples. Actions are numbered in
the lexicographic order of `(src, dst, arrow)`, so sorting actions sorts moves.

Actions and observations are in the **side to move's canonical frame** (docs/ARCHITECTURE.md):
for Black the real (Botzone) board, for White the board rotated 180 degrees (square `s` ->
`63 - s`) with the colours swapped. So one policy serves both colours, as for the project's own
network, and the engine's canonical legal moves encode with one table lookup:

    ACTION_INDEX[src, dst, arrow]  # (64, 64, 64) int32, the action of a canonical move, -1 if none
    ACTION_MOVES[action]           # (NUM_ACTIONS, 3) int32, the canonical move of an action

Observations are the engine's feature planes (`amazons.engine.features`, 3 or 7 planes) of the
position seen by one player: that player's amazons are "mine", in that player's frame.

Imports numpy and `amazons.board`, `amazons.engine`, `amazons.symmetry`; no RL library.
"""

from __future__ import annotations

import numpy as np

from amazons import engine
from amazons.board import BLACK, WHITE, Board, Move, square_name
from amazons.symmetry import canonical_to_real, real_to_canonical, transform_positions

__all__ = [
    "ACTION_DTYPE",
    "ACTION_INDEX",
    "ACTION_MOVES",
    "NUM_ACTIONS",
    "ActionError",
    "IllegalActionError",
    "action_mask",
    "action_masks",
    "action_to_move",
    "decode_actions",
    "encode_moves",
    "legal_actions",
    "move_to_action",
    "observation_planes",
    "player_view",
]

ACTION_DTYPE = np.int64
NO_ACTION = -1  # ACTION_INDEX entry of a triple that is not a move geometry
ROTATE_180 = 2  # index of the 180-degree rotation in amazons.symmetry.SYMMETRIES


class ActionError(ValueError):
    """An action id is out of range, or a move has no action (not a queen-line geometry)."""


class IllegalActionError(ActionError):
    """A well-formed action is not a legal move in the position; the environment is unchanged."""


def _build_tables() -> tuple[np.ndarray, np.ndarray]:
    squares = np.arange(64)
    dx = squares[None, :] % 8 - squares[:, None] % 8
    dy = squares[None, :] // 8 - squares[:, None] // 8
    queen_line = ((dx == 0) | (dy == 0) | (np.abs(dx) == np.abs(dy))) & ~((dx == 0) & (dy == 0))
    geometry = queen_line[:, :, None] & queen_line[None, :, :]  # [src, dst, arrow]
    moves = np.argwhere(geometry).astype(engine.MOVE_DTYPE)  # row-major: lexicographic order
    index = np.full((64, 64, 64), NO_ACTION, dtype=np.int32)
    index[moves[:, 0], moves[:, 1], moves[:, 2]] = np.arange(moves.shape[0], dtype=np.int32)
    moves.setflags(write=False)
    index.setflags(write=False)
    return moves, index


ACTION_MOVES, ACTION_INDEX = _build_tables()
NUM_ACTIONS = int(ACTION_MOVES.shape[0])  # 33,344


def encode_moves(moves: np.ndarray) -> np.ndarray:
    """Actions of moves, `(K, 3)` integer squares -> `(K,) int64`.

    Raises:
        ActionError: naming the first row that is not a move geometry (or a square off the board).
    """
    moves = np.asarray(moves)
    if moves.ndim != 2 or moves.shape[1] != 3 or not np.issubdtype(moves.dtype, np.integer):
        raise ActionError(f"moves must be a (K, 3) integer array, got {moves.shape} {moves.dtype}")
    off_board = ((moves < 0) | (moves >= 64)).any(axis=1)
    if off_board.any():
        row = int(np.flatnonzero(off_board)[0])
        raise ActionError(f"moves[{row}] = {moves[row].tolist()} "
                          "has a square off the board (0..63)")
    actions = ACTION_INDEX[moves[:, 0], moves[:, 1], moves[:, 2]].astype(ACTION_DTYPE)
    if (actions == NO_ACTION).any():
        row = int(np.flatnonzero(actions == NO_ACTION)[0])
        src, dst, arrow = (square_name(int(square)) for square in moves[row])
        raise ActionError(f"moves[{row}] = {src}-{dst}/{arrow} "
                          "is not two queen lines: it has no action")
    return actions


def decode_actions(actions: np.ndarray) -> np.ndarray:
    """Moves of actions, `(K,)` integers -> `(K, 3) int32` (src, dst, arrow), same frame.

    Raises:
        ActionError: naming the first action outside `0 .. NUM_ACTIONS - 1`.
    """
    actions = np.asarray(actions)
    if actions.ndim != 1 or not np.issubdtype(actions.dtype, np.integer):
        raise ActionError(f"actions must be a (K,) integer array, "
                          f"got {actions.shape} {actions.dtype}")
    bad = (actions < 0) | (actions >= NUM_ACTIONS)
    if bad.any():
        raise ActionError(f"action {int(actions[bad][0])} is outside 0..{NUM_ACTIONS - 1}")
    return ACTION_MOVES[actions]


def legal_actions(position: np.ndarray) -> np.ndarray:
    """Sorted legal actions of one canonical position `(3,) uint64`, `(K,) int64`."""
    moves, _ = engine.legal_moves(position)
    return np.sort(ACTION_INDEX[moves[:, 0], moves[:, 1], moves[:, 2]].astype(ACTION_DTYPE))


def action_masks(positions: np.ndarray) -> np.ndarray:
    """Legal-action masks of canonical positions, `(B, 3) uint64` -> `(B, NUM_ACTIONS) int8`."""
    moves, offsets = engine.legal_moves(positions)
    count = offsets.shape[0] - 1
    masks = np.zeros((count, NUM_ACTIONS), dtype=np.int8)
    rows = np.repeat(np.arange(count), np.diff(offsets))
    masks[rows, ACTION_INDEX[moves[:, 0], moves[:, 1], moves[:, 2]]] = 1
    return masks


def action_mask(position: np.ndarray) -> np.ndarray:
    """Legal-action mask of one canonical position `(3,) uint64`, `(NUM_ACTIONS,) int8`."""
    return action_masks(position.reshape(1, 3))[0]


def action_to_move(board: Board, action: int) -> Move:
    """The real-frame `Move` of `action` for the side to move on `board` (legal or not).

    Raises:
        ActionError: if `action` is not an integer in `0 .. NUM_ACTIONS - 1`.
    """
    if not isinstance(action, (int, np.integer)) or isinstance(action, bool):
        raise ActionError(f"an action must be an integer, got {action!r}")
    canonical = decode_actions(np.array([action], dtype=ACTION_DTYPE))[0]
    return Move(*canonical_to_real(canonical, board.turn).tolist())


def move_to_action(board: Board, move: Move) -> int:
    """The action of a real-frame `move` for the side to move on `board` (legal or not).

    Raises:
        ActionError: if the move is not a queen-line geometry.
    """
    canonical = real_to_canonical(np.array([move.as_tuple()], dtype=engine.MOVE_DTYPE), board.turn)
    return int(encode_moves(canonical)[0])


def player_view(board: Board, color: int) -> np.ndarray:
    """The position as `color` sees it, `(3,) uint64` [mine, theirs, arrows] in `color`'s frame.

    Equal to `board.canonical_position()` when `color` is to move; for the other side it is the
    canonical position that side would have if it were to move.
    """
    if color not in (BLACK, WHITE):
        raise ActionError(f"color must be 0 (black) or 1 (white), got {color!r}")
    if color == board.turn:
        return board.canonical_position()
    black, white, arrows = board.bitboards()
    if color == BLACK:
        return np.array([black, white, arrows], dtype=engine.POSITION_DTYPE)
    real = np.array([[white, black, arrows]], dtype=engine.POSITION_DTYPE)
    return transform_positions(real, ROTATE_180)[0]


def observation_planes(board: Board, color: int, num_planes: int = 7) -> np.ndarray:
    """Feature planes of `player_view(board, color)`, `(num_planes, 8, 8) float32` in {0, 1}.

    `planes[c, y, x]` is square `y * 8 + x` of `color`'s frame; the plane order is
    `amazons.engine.features`' (3 planes: mine, theirs, arrows; 7 planes add obstacles and both
    sides' mobility and shoot potential).
    """
    return engine.features(player_view(board, color).reshape(1, 3), num_planes=num_planes)[0]
