"""A pure-Python rules oracle for the Game of the Amazons (8x8, Botzone), for tests and benchmarks.

Written plainly from the rules in `shared/reference/AMAZONS.md`, and slow on purpose: a square
is an `(x, y)` tuple (x = column 0..7 left to right, y = row 0..7 top to bottom), a side's pieces
are a frozenset of squares, and an amazon or an arrow travels one queen step at a time until it
leaves the board or meets an obstacle. There are no bitboards here, and nothing is imported from
`amazons` (its rules are what this module checks). The only contact with the engine's encodings
is a handful of converters at the bottom (square indices `y * 8 + x`, 64-bit ints as square sets,
`(3,) uint64` canonical arrays), each a direct transcription of docs/ARCHITECTURE.md.

Two views of a position:
* `Position`: the real (Botzone) frame: Black's and White's amazons, arrows, the side to move.
* a canonical triple `(mine, theirs, arrows)` of square sets: the side to move's view, where
  White's view is the real board rotated 180 degrees, `(x, y) -> (7 - x, 7 - y)`. The rules do
  not care about colour, so `legal_moves`, `play_move` and friends take a triple in any frame.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

Square = tuple[int, int]
Move = tuple[Square, Square, Square]  # (amazon's square, landing square, arrow square)

SIZE = 8
BLACK, WHITE = 0, 1
DIRECTIONS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (1, -1), (-1, 1), (-1, -1))
ALL_SQUARES = tuple((x, y) for y in range(SIZE) for x in range(SIZE))
START_BLACK = frozenset({(0, 2), (2, 0), (5, 0), (7, 2)})
START_WHITE = frozenset({(0, 5), (2, 7), (5, 7), (7, 5)})

# The 8 symmetries of the square, each as a map on (x, y); the names say what they do to the
# picture of the board (x to the right, y downwards).
D4_TRANSFORMS = {
    "identity": lambda x, y: (x, y),
    "rotate_quarter_a": lambda x, y: (7 - y, x),
    "rotate_half": lambda x, y: (7 - x, 7 - y),
    "rotate_quarter_b": lambda x, y: (y, 7 - x),
    "mirror_left_right": lambda x, y: (7 - x, y),
    "mirror_top_bottom": lambda x, y: (x, 7 - y),
    "main_diagonal": lambda x, y: (y, x),
    "anti_diagonal": lambda x, y: (7 - y, 7 - x),
}


def on_board(square: Square) -> bool:
    """Whether `(x, y)` lies on the 8x8 board."""
    x, y = square
    return 0 <= x < SIZE and 0 <= y < SIZE


def queen_reach(start: Square, obstacles: set | frozenset) -> set[Square]:
    """Empty squares a queen on `start` reaches in one move, stepping one square at a time.

    Args:
        start: the queen's square (it does not block itself).
        obstacles: squares the queen can neither enter nor pass.
    """
    reached = set()
    for dx, dy in DIRECTIONS:
        x, y = start[0] + dx, start[1] + dy
        while on_board((x, y)) and (x, y) not in obstacles:
            reached.add((x, y))
            x, y = x + dx, y + dy
    return reached


def legal_moves(mine: frozenset, theirs: frozenset, arrows: frozenset) -> list[Move]:
    """All legal moves of the side owning `mine`.

    The amazon leaves its square, slides like a queen, and shoots an arrow like a queen from its
    landing square; the square it left is empty by then.
    """
    obstacles = set(mine) | set(theirs) | set(arrows)
    moves = []
    for source in mine:
        for destination in queen_reach(source, obstacles):
            obstacles_after_slide = (obstacles - {source}) | {destination}
            for arrow in queen_reach(destination, obstacles_after_slide):
                moves.append((source, destination, arrow))
    return moves


def is_legal(mine: frozenset, theirs: frozenset, arrows: frozenset, move: Move) -> bool:
    """Whether `move` is legal for the side owning `mine`, checked square by square."""
    source, destination, arrow = move
    obstacles = set(mine) | set(theirs) | set(arrows)
    if source not in mine or destination not in queen_reach(source, obstacles):
        return False
    return arrow in queen_reach(destination, (obstacles - {source}) | {destination})


def play_move(mine: frozenset, theirs: frozenset, arrows: frozenset, move: Move) -> tuple:
    """`(mine, arrows)` after `move` (not checked; the caller checks legality)."""
    source, destination, arrow = move
    return (mine - {source}) | {destination}, arrows | {arrow}


def has_any_move(mine: frozenset, theirs: frozenset, arrows: frozenset) -> bool:
    """Whether the side owning `mine` has a legal move, by listing them."""
    return len(legal_moves(mine, theirs, arrows)) > 0


def perft(mine: frozenset, theirs: frozenset, arrows: frozenset, depth: int) -> int:
    """Number of move sequences of exactly `depth` plies, by full expansion (no bulk counting)."""
    if depth == 0:
        return 1
    total = 0
    for move in legal_moves(mine, theirs, arrows):
        new_mine, new_arrows = play_move(mine, theirs, arrows, move)
        total += perft(theirs, new_mine, new_arrows, depth - 1)
    return total


def rotate_half(square: Square) -> Square:
    """The 180-degree rotation `(x, y) -> (7 - x, 7 - y)`."""
    return (SIZE - 1 - square[0], SIZE - 1 - square[1])


def map_squares(transform, squares) -> frozenset:
    """Image of a set of squares under a map on `(x, y)`."""
    return frozenset(transform(*square) for square in squares)


def map_move(transform, move: Move) -> Move:
    """Image of a move (all three squares) under a map on `(x, y)`."""
    return tuple(transform(*square) for square in move)


@dataclass(frozen=True)
class Position:
    """A position in the real (Botzone) frame; Botzone's start with Black to move by default."""

    black: frozenset = START_BLACK
    white: frozenset = START_WHITE
    arrows: frozenset = frozenset()
    turn: int = BLACK

    def mover_and_waiting(self) -> tuple[frozenset, frozenset]:
        """`(side to move's amazons, the other side's amazons)`."""
        return (self.black, self.white) if self.turn == BLACK else (self.white, self.black)

    def legal_moves(self) -> list[Move]:
        """Legal moves of the side to move, real frame."""
        mover, waiting = self.mover_and_waiting()
        return legal_moves(mover, waiting, self.arrows)

    def play(self, move: Move) -> Position:
        """The position after `move` by the side to move.

        Raises:
            ValueError: if the move is not legal.
        """
        mover, waiting = self.mover_and_waiting()
        if not is_legal(mover, waiting, self.arrows, move):
            raise ValueError(f"illegal move {move} for side {self.turn}")
        new_mover, new_arrows = play_move(mover, waiting, self.arrows, move)
        if self.turn == BLACK:
            return Position(new_mover, waiting, new_arrows, WHITE)
        return Position(waiting, new_mover, new_arrows, BLACK)

    def is_terminal(self) -> bool:
        """Whether the side to move has no legal move."""
        mover, waiting = self.mover_and_waiting()
        return not has_any_move(mover, waiting, self.arrows)

    def winner(self) -> int | None:
        """The side that won (the opponent of a side left without a move), or None if not over."""
        return 1 - self.turn if self.is_terminal() else None

    def canonical(self) -> tuple[frozenset, frozenset, frozenset]:
        """The side to move's view `(mine, theirs, arrows)`: White's is rotated 180 degrees."""
        mover, waiting = self.mover_and_waiting()
        if self.turn == BLACK:
            return mover, waiting, self.arrows
        half_turn = D4_TRANSFORMS["rotate_half"]
        return (
            map_squares(half_turn, mover),
            map_squares(half_turn, waiting),
            map_squares(half_turn, self.arrows),
        )

    def canonical_legal_moves(self) -> list[Move]:
        """Legal moves in the canonical frame, computed on the canonical view."""
        return legal_moves(*self.canonical())

    def real_move(self, canonical_move: Move) -> Move:
        """The real-frame move of a canonical move of the side to move."""
        if self.turn == BLACK:
            return canonical_move
        return tuple(rotate_half(square) for square in canonical_move)

    def canonical_move(self, real_move: Move) -> Move:
        """The canonical-frame move of a real move of the side to move."""
        if self.turn == BLACK:
            return real_move
        return tuple(rotate_half(square) for square in real_move)

    def position_string(self, ply: int) -> str:
        """The compact position string of docs (rows from y = 0, digits for empty runs)."""
        rows = []
        for y in range(SIZE):
            text, empty = "", 0
            for x in range(SIZE):
                if (x, y) in self.black:
                    piece = "B"
                elif (x, y) in self.white:
                    piece = "W"
                elif (x, y) in self.arrows:
                    piece = "x"
                else:
                    empty += 1
                    continue
                text += (str(empty) if empty else "") + piece
                empty = 0
            rows.append(text + (str(empty) if empty else ""))
        return "/".join(rows) + " " + ("b" if self.turn == BLACK else "w") + f" {ply}"


def play_line(moves, start: Position | None = None) -> list[Position]:
    """Positions along a line of real-frame moves, the start included (`len(moves) + 1` items)."""
    positions = [start if start is not None else Position()]
    for move in moves:
        positions.append(positions[-1].play(move))
    return positions


def random_game(seed: int, max_plies: int | None = None,
                start: Position | None = None) -> list[Move]:
    """A uniformly random legal game (real-frame moves) from `start`, reproducible from `seed`.

    Stops when the side to move has no move, or after `max_plies` plies.
    """
    rng = random.Random(seed)
    position = start if start is not None else Position()
    moves = []
    while max_plies is None or len(moves) < max_plies:
        options = sorted(position.legal_moves())
        if not options:
            break
        move = rng.choice(options)
        moves.append(move)
        position = position.play(move)
    return moves


def possible_outcomes(mine: frozenset, theirs: frozenset, arrows: frozenset,
                      limit: int) -> set | None:
    """Results (+1 / -1 for the side owning `mine`) that some line of play can reach.

    Returns None when the game tree has more than `limit` nodes (too big to list).
    """
    budget = [limit]
    cache: dict = {}

    def visit(me: frozenset, them: frozenset, shots: frozenset) -> set | None:
        key = (me, them, shots)
        if key in cache:
            return cache[key]
        budget[0] -= 1
        if budget[0] < 0:
            return None
        moves = legal_moves(me, them, shots)
        if not moves:
            cache[key] = {-1}
            return cache[key]
        results = set()
        for move in moves:
            new_me, new_shots = play_move(me, them, shots, move)
            child = visit(them, new_me, new_shots)
            if child is None:
                return None
            results |= {-value for value in child}
            if results == {-1, 1}:
                break
        cache[key] = results
        return results

    return visit(mine, theirs, arrows)


# ---------------------------------------------------------------------------------------------
# Feature planes, naively (docs/ARCHITECTURE.md), `planes[c, y, x]`
# ---------------------------------------------------------------------------------------------

def plane_of(squares) -> np.ndarray:
    """An `(8, 8) float32` plane with 1 on each `(x, y)` in `squares`, at `[y, x]`."""
    plane = np.zeros((SIZE, SIZE), dtype=np.float32)
    for x, y in squares:
        plane[y, x] = 1.0
    return plane


def mobility(movers: frozenset, mine: frozenset, theirs: frozenset, arrows: frozenset) -> set:
    """Squares one of `movers` reaches with one queen move."""
    obstacles = set(mine) | set(theirs) | set(arrows)
    reached = set()
    for amazon in movers:
        reached |= queen_reach(amazon, obstacles)
    return reached


def shoot_potential(mover: frozenset, waiting: frozenset, arrows: frozenset) -> set:
    """Union of the arrow squares of all legal moves of the side owning `mover`."""
    return {arrow for _, _, arrow in legal_moves(mover, waiting, arrows)}


def feature_planes(mine: frozenset, theirs: frozenset, arrows: frozenset,
                   num_planes: int = 7) -> np.ndarray:
    """The 3- or 7-plane encoding of a canonical triple, `(C, 8, 8) float32`.

    3 planes: mine, theirs, arrows. 7 planes: mine, theirs, all obstacles, my mobility, their
    mobility, my shoot potential, their shoot potential (as if they were to move).
    """
    if num_planes == 3:
        return np.stack([plane_of(mine), plane_of(theirs), plane_of(arrows)])
    if num_planes != 7:
        raise ValueError(f"num_planes must be 3 or 7, got {num_planes}")
    return np.stack(
        [
            plane_of(mine),
            plane_of(theirs),
            plane_of(set(mine) | set(theirs) | set(arrows)),
            plane_of(mobility(mine, mine, theirs, arrows)),
            plane_of(mobility(theirs, mine, theirs, arrows)),
            plane_of(shoot_potential(mine, theirs, arrows)),
            plane_of(shoot_potential(theirs, mine, arrows)),
        ]
    )


# ---------------------------------------------------------------------------------------------
# Converters to the engine's encodings (docs/ARCHITECTURE.md)
# ---------------------------------------------------------------------------------------------

def square_index(square: Square) -> int:
    """Square number `y * 8 + x`."""
    return square[1] * SIZE + square[0]


def square_at(index: int) -> Square:
    """`(x, y)` of square number `index`."""
    return (int(index) % SIZE, int(index) // SIZE)


def move_indices(move: Move) -> tuple[int, int, int]:
    """A move as three square numbers."""
    return tuple(square_index(square) for square in move)


def move_from_indices(row) -> Move:
    """A move from three square numbers (e.g. a row of an `(M, 3) int32` array)."""
    return tuple(square_at(index) for index in row)


def move_index_set(moves) -> set[tuple[int, int, int]]:
    """A set of `(src, dst, arrow)` square-number triples from oracle moves."""
    return {move_indices(move) for move in moves}


def rows_as_set(rows: np.ndarray) -> set[tuple[int, int, int]]:
    """A set of `(src, dst, arrow)` triples from an `(M, 3)` integer array."""
    return {tuple(int(value) for value in row) for row in rows}


def bitboard(squares) -> int:
    """A 64-bit int with bit `y * 8 + x` set for each `(x, y)` in `squares`."""
    value = 0
    for square in squares:
        value |= 1 << square_index(square)
    return value


def squares_of(value: int) -> frozenset:
    """The squares whose bits are set in a 64-bit int."""
    value = int(value)
    return frozenset(square_at(index) for index in range(64) if (value >> index) & 1)


def triple_array(mine, theirs, arrows) -> np.ndarray:
    """A canonical triple as a `(3,) uint64` array `[MINE, THEIRS, ARROWS]`."""
    return np.array([bitboard(mine), bitboard(theirs), bitboard(arrows)], dtype=np.uint64)


def triple_of(array: np.ndarray) -> tuple[frozenset, frozenset, frozenset]:
    """A `(3,) uint64` canonical position as a triple of square sets."""
    return squares_of(array[0]), squares_of(array[1]), squares_of(array[2])
