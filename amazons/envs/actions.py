"""The flat action encoding and the observations shared by the environments, on every board size.

An action is one whole move, `(src, dst, arrow)`, as one integer in `0 .. num_actions(N) - 1`.
The action space of an `N x N` board enumerates every move geometry of that board: `dst` on a
queen line from `src`, `arrow` on a queen line from `dst` (on an empty board; the arrow may land
on `src`). Actions are numbered in the lexicographic order of `(src, dst, arrow)`, so sorting
actions sorts moves. On 8x8 there are 1,456 queen lines (src, dst) and `sum(reach(d) ** 2)` =
33,344 triples (`NUM_ACTIONS`); on 6x6 9,412, on 10x10 86,980 (`num_actions(size)`).

Actions and observations are in the **side to move's canonical frame** (docs/ARCHITECTURE.md):
for Black the real (Botzone) board, for White the board rotated 180 degrees (square `s` ->
`N * N - 1 - s`) with the colours swapped. So one policy serves both colours, as for the
project's own network, and the engine's canonical legal moves encode with one table lookup:

    action_table(N).index[src, dst, arrow]  # (N*N, N*N, N*N) int32, a move's action, -1 if none
    action_table(N).moves[action]           # (num_actions(N), 3) int32, an action's move

`ACTION_INDEX`, `ACTION_MOVES` and `NUM_ACTIONS` are the 8x8 table's. Functions whose input does
not show the size (squares, actions, one canonical position) take `size=8`; those given a `Board`
use its size.

Observations are the engine's feature planes (`amazons.engine.features`, 3 or 7 planes) of the
position seen by one player: that player's amazons are "mine", in that player's frame,
`(C, N, N) float32`.

Imports numpy and `amazons.board`, `amazons.engine`, `amazons.symmetry`; no RL library.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

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
    "ActionTable",
    "IllegalActionError",
    "action_mask",
    "action_masks",
    "action_table",
    "action_to_move",
    "decode_actions",
    "encode_moves",
    "legal_actions",
    "move_to_action",
    "num_actions",
    "observation_planes",
    "player_view",
]

ACTION_DTYPE = np.int64
NO_ACTION = -1  # ActionTable.index entry of a triple that is not a move geometry
ROTATE_180 = 2  # index of the 180-degree rotation in amazons.symmetry.SYMMETRIES


class ActionError(ValueError):
    """An action id is out of range, or a move has no action (not a queen-line geometry)."""


class IllegalActionError(ActionError):
    """A well-formed action is not a legal move in the position; the environment is unchanged."""


@dataclass(frozen=True, eq=False)
class ActionTable:
    """The action encoding of one board size (read-only arrays).

    Attributes:
        size: `N` of the `N x N` board.
        moves: `(num_actions, 3) int32`, the canonical move `(src, dst, arrow)` of each action.
        index: `(N*N, N*N, N*N) int32`, the action of a move geometry, `NO_ACTION` (-1) if none.
    """

    size: int
    moves: np.ndarray
    index: np.ndarray

    @property
    def num_actions(self) -> int:
        """How many actions: every move geometry of the board."""
        return int(self.moves.shape[0])


@cache
def action_table(size: int = 8) -> ActionTable:
    """The action encoding of a `size x size` board (built once per size, then shared).

    Raises:
        ActionError: for a size outside 6..10.
    """
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) \
            or size not in engine.BOARD_SIZES:
        raise ActionError(f"board size must be one of {engine.BOARD_SIZES}, got {size!r}")
    size = int(size)
    count = size * size
    squares = np.arange(count)
    dx = squares[None, :] % size - squares[:, None] % size
    dy = squares[None, :] // size - squares[:, None] // size
    queen_line = ((dx == 0) | (dy == 0) | (np.abs(dx) == np.abs(dy))) & ~((dx == 0) & (dy == 0))
    geometry = queen_line[:, :, None] & queen_line[None, :, :]  # [src, dst, arrow]
    moves = np.argwhere(geometry).astype(engine.MOVE_DTYPE)  # row-major: lexicographic order
    index = np.full((count, count, count), NO_ACTION, dtype=np.int32)
    index[moves[:, 0], moves[:, 1], moves[:, 2]] = np.arange(moves.shape[0], dtype=np.int32)
    moves.setflags(write=False)
    index.setflags(write=False)
    return ActionTable(size, moves, index)


def num_actions(size: int = 8) -> int:
    """Actions of a `size x size` board: 9,412 on 6x6, 33,344 on 8x8, 86,980 on 10x10."""
    return action_table(size).num_actions


ACTION_MOVES = action_table(8).moves
ACTION_INDEX = action_table(8).index
NUM_ACTIONS = num_actions(8)  # 33,344


def encode_moves(moves: np.ndarray, size: int = 8) -> np.ndarray:
    """Actions of moves on a `size x size` board, `(K, 3)` integer squares -> `(K,) int64`.

    Raises:
        ActionError: naming the first row that is not a move geometry (or a square off the board).
    """
    table = action_table(size)
    moves = np.asarray(moves)
    if moves.ndim != 2 or moves.shape[1] != 3 or not np.issubdtype(moves.dtype, np.integer):
        raise ActionError(f"moves must be a (K, 3) integer array, got {moves.shape} {moves.dtype}")
    last = size * size - 1
    off_board = ((moves < 0) | (moves > last)).any(axis=1)
    if off_board.any():
        row = int(np.flatnonzero(off_board)[0])
        raise ActionError(f"moves[{row}] = {moves[row].tolist()} "
                          f"has a square off the board ({size}x{size}: squares 0..{last})")
    actions = table.index[moves[:, 0], moves[:, 1], moves[:, 2]].astype(ACTION_DTYPE)
    if (actions == NO_ACTION).any():
        row = int(np.flatnonzero(actions == NO_ACTION)[0])
        src, dst, arrow = (square_name(int(square), size) for square in moves[row])
        raise ActionError(f"moves[{row}] = {src}-{dst}/{arrow} "
                          "is not two queen lines: it has no action")
    return actions


def decode_actions(actions: np.ndarray, size: int = 8) -> np.ndarray:
    """Moves of actions on a `size x size` board, `(K,)` integers -> `(K, 3) int32`
    (src, dst, arrow), same frame.

    Raises:
        ActionError: naming the first action outside `0 .. num_actions(size) - 1`.
    """
    table = action_table(size)
    actions = np.asarray(actions)
    if actions.ndim != 1 or not np.issubdtype(actions.dtype, np.integer):
        raise ActionError(f"actions must be a (K,) integer array, "
                          f"got {actions.shape} {actions.dtype}")
    bad = (actions < 0) | (actions >= table.num_actions)
    if bad.any():
        raise ActionError(f"action {int(actions[bad][0])} is outside 0..{table.num_actions - 1}"
                          + ("" if size == 8 else f" (the {size}x{size} board's actions)"))
    return table.moves[actions]


def legal_actions(position: np.ndarray, size: int = 8) -> np.ndarray:
    """Sorted legal actions of one canonical position `(3 * W,) uint64` of a `size x size`
    board, `(K,) int64`."""
    moves, _ = engine.legal_moves(position, size=size)
    index = action_table(size).index
    return np.sort(index[moves[:, 0], moves[:, 1], moves[:, 2]].astype(ACTION_DTYPE))


def action_masks(positions: np.ndarray, size: int = 8) -> np.ndarray:
    """Legal-action masks of canonical positions of a `size x size` board,
    `(B, 3 * W) uint64` -> `(B, num_actions(size)) int8`."""
    table = action_table(size)
    moves, offsets = engine.legal_moves(positions, size=size)
    count = offsets.shape[0] - 1
    masks = np.zeros((count, table.num_actions), dtype=np.int8)
    rows = np.repeat(np.arange(count), np.diff(offsets))
    masks[rows, table.index[moves[:, 0], moves[:, 1], moves[:, 2]]] = 1
    return masks


def action_mask(position: np.ndarray, size: int = 8) -> np.ndarray:
    """Legal-action mask of one canonical position `(3 * W,) uint64` of a `size x size` board,
    `(num_actions(size),) int8`."""
    return action_masks(position.reshape(1, -1), size)[0]


def action_to_move(board: Board, action: int) -> Move:
    """The real-frame `Move` of `action` for the side to move on `board` (legal or not), in the
    action encoding of the board's size.

    Raises:
        ActionError: if `action` is not an integer in `0 .. num_actions(board.size) - 1`.
    """
    if not isinstance(action, (int, np.integer)) or isinstance(action, bool):
        raise ActionError(f"an action must be an integer, got {action!r}")
    size = board.size
    canonical = decode_actions(np.array([action], dtype=ACTION_DTYPE), size)[0]
    return Move(*canonical_to_real(canonical, board.turn, size).tolist(), size=size)


def move_to_action(board: Board, move: Move) -> int:
    """The action of a real-frame `move` for the side to move on `board` (legal or not).

    Raises:
        ActionError: if the move is not a queen-line geometry, or is of another board size.
    """
    if move.size != board.size:
        raise ActionError(f"move {move} is of a {move.size}x{move.size} board, the board is "
                          f"{board.size}x{board.size}")
    canonical = real_to_canonical(np.array([move.as_tuple()], dtype=engine.MOVE_DTYPE),
                                  board.turn, board.size)
    return int(encode_moves(canonical, board.size)[0])


def player_view(board: Board, color: int) -> np.ndarray:
    """The position as `color` sees it, `(3 * W,) uint64` [mine, theirs, arrows] in `color`'s
    frame.

    Equal to `board.canonical_position()` when `color` is to move; for the other side it is the
    canonical position that side would have if it were to move: the side to move's view with
    mine and theirs swapped, rotated 180 degrees (Black's frame is the real board, White's the
    real board rotated, and the rotation is its own inverse).
    """
    if color not in (BLACK, WHITE):
        raise ActionError(f"color must be 0 (black) or 1 (white), got {color!r}")
    position = board.canonical_position()
    if color == board.turn:
        return position
    mine, theirs, arrows = np.split(position, 3)
    swapped = np.concatenate([theirs, mine, arrows]).reshape(1, -1)
    return transform_positions(swapped, ROTATE_180, board.size)[0]


def observation_planes(board: Board, color: int, num_planes: int = 7) -> np.ndarray:
    """Feature planes of `player_view(board, color)`, `(num_planes, N, N) float32` in {0, 1}.

    `planes[c, y, x]` is square `y * N + x` of `color`'s frame; the plane order is
    `amazons.engine.features`' (3 planes: mine, theirs, arrows; 7 planes add obstacles and both
    sides' mobility and shoot potential).
    """
    view = player_view(board, color).reshape(1, -1)
    return engine.features(view, num_planes=num_planes, size=board.size)[0]
