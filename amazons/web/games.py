"""Games on the web board: one `GameSession` per game, and the `GameStore` that runs their searches.

A session holds a `Board` of the board its game was started on (`botzone8`, `standard10`,
`openspiel6` or a start position string: `amazons.boards.board_spec`), the AI
(`amazons.players.factory.build_model_player`, the builder the arena, the Botzone bot and terminal
play use too; here a `.pt` checkpoint is accepted and runs as the model
`amazons.neural.model.prepare_for_inference` makes; it is built for the board's size, so a network
that cannot play it, one with the flat value head off 8x8, is refused when the game is made,
naming the model and the size), the colours the human plays (one, or both for an analysis
board), the last search's analysis and where the record is saved.

Concurrency: sessions are read and changed only on the event loop. A search runs on a worker
thread (the store's executor) with a copy of the board and the session's own player; while it
runs the session is busy, so a game has at most one search at a time and refuses moves, undo and
analysis meanwhile (`ConflictError`, HTTP 409). Numba kernels and the engine's batch calls are
short and release the interpreter between rounds, so the event loop keeps answering during a
search. Whoever waits for a change (a websocket) gets an `asyncio.Event` set on every change.

Which models a game may name is `ServedModels`' to say: the names `default` and `none`, the
board's own `--model`, the shipped model files, and the files inside the folders the board was
started with (`--models`, `--run`); never any other path on the server.

Imports `board`, `boards`, `models` (the shipped files), `players.factory`, `players.player`,
`players.records` and the web package's own modules.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import secrets
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from amazons.board import BLACK, COLOR_NAMES, WHITE, Board, IllegalMoveError, Move
from amazons.boards import DEFAULT_BOARD, BoardSpec, NotationError, board_spec
from amazons.models import SHIPPED_MODELS, default_checkpoint_path, default_model_path
from amazons.players.factory import build_model_player, make_player
from amazons.players.player import MCTSPlayer, Player
from amazons.players.records import RESULT_TEXT, GameRecord, write_records
from amazons.web.inputs import (
    BadRequestError,
    ConflictError,
    JsonFields,
    NotFoundError,
    ServedPaths,
)
from amazons.web.views import (
    analysis_view,
    board_squares,
    board_view,
    legal_move_tree,
    move_view,
    territory_view,
)

__all__ = ["GameSession", "GameSettings", "GameStore", "ServedModels", "game_settings"]

SIDES = {"black": (BLACK,), "white": (WHITE,), "both": (BLACK, WHITE)}
MAX_TIME = 60.0  # seconds per AI move or analysis a request may ask for
MAX_SIMULATIONS = 100_000
GAME_FIELDS = ("side", "model", "time", "simulations", "seed", "board", "moves")
SEARCH_FIELDS = ("time", "simulations")
# AIs that are players of the factory's registry rather than a model's search: no network, every
# board size. Such a game's analyses are rollout MCTS's (`none`).
PLAYER_AIS = ("random", "greedy", "classical")

T = TypeVar("T")


@dataclass(frozen=True)
class GameSettings:
    """How a game is played; from the body of `POST /api/games`."""

    human_colors: tuple[int, ...]  # colours the human plays: (BLACK,), (WHITE,) or both
    # "default" (the shipped network), "none" (rollout MCTS),
    # an exported .npz model or a .pt checkpoint
    model: str
    time_budget: float | None  # AI seconds per move, or None when `simulations` is set
    simulations: int | None  # AI simulations per move, or None when `time_budget` is set
    seed: int | None  # seeds the AI's search
    opening: tuple[Move, ...]  # moves played from the start before the game begins
    board: BoardSpec  # the board: its size, its start and the side that moves first

    @property
    def search_text(self) -> str:
        """`"1 s per move"` or `"200 simulations"`, for the record and the page."""
        if self.time_budget is not None:
            return f"{self.time_budget:g} s per move"
        return f"{self.simulations} simulations"


def _search_strength(fields: JsonFields,
                     default_time: float | None) -> tuple[float | None, int | None]:
    if "time" in fields and "simulations" in fields:
        raise BadRequestError("give either 'time' or 'simulations', not both")
    simulations = fields.integer("simulations", minimum=1, maximum=MAX_SIMULATIONS)
    if simulations is not None:
        return None, simulations
    return fields.positive_number("time", default_time, maximum=MAX_TIME), None


def game_settings(body: dict[str, Any], default_model: str, default_time: float,
                  default_board: BoardSpec | str = DEFAULT_BOARD) -> GameSettings:
    """Settings from a `POST /api/games` body.

    Fields: `side` (`black`, `white` or `both`; default `black`), `model` (default
    `default_model`), `time` (seconds per AI move, default `default_time`) or `simulations`,
    `seed`, `board` (a name in `amazons.boards.BOARDS`, a start position string, or the
    `{"size", "black", "white", "first"}` object a state's `board` is; default
    `default_board`),
    `moves` (moves from the start, either notation of the board's size, to continue a game from).

    Raises:
        BadRequestError: an unknown field, a bad value, a board that is none (named), or an
            illegal move in `moves` (named).
    """
    fields = JsonFields(body, GAME_FIELDS)
    side = fields.string("side", "black", choices=SIDES)
    model = fields.string("model", default_model)
    time_budget, simulations = _search_strength(fields, default_time)
    seed = fields.integer("seed", minimum=0, maximum=2**63 - 1)
    board = _board_field(fields.values.get("board", default_board))
    opening = fields.moves("moves", board.size)
    try:
        Board.from_moves(opening, start=board)
    except IllegalMoveError as error:
        raise BadRequestError(f"field 'moves': {error}") from None
    return GameSettings(SIDES[side], model, time_budget, simulations, seed, tuple(opening),
                        board)


def _board_field(value: Any) -> BoardSpec:
    if isinstance(value, BoardSpec):
        return value
    if not isinstance(value, (str, dict)) or (isinstance(value, str) and not value.strip()):
        raise BadRequestError("field 'board' must be a board name (botzone8, standard10, ...), a "
                              f"start position string or a board object, got "
                              f"{json.dumps(value)[:80]}")
    if isinstance(value, dict):
        value = {key: item for key, item in value.items() if key != "label"}
    try:
        return board_spec(value)
    except (NotationError, TypeError) as error:
        raise BadRequestError(f"field 'board': {error}") from None


class ServedModels:
    """The models a game on this board may name: the `model` of `POST /api/games`.

    The names `default` and `none`; the board's own model (`--model`); the shipped model files
    (`amazons.models`); and any file inside the folders the board was started with (`--models`,
    `--run`). A path is checked by `ServedPaths`, the web board's one rule for the paths a
    request names: made real (links followed, `..` collapsed) and loaded from there, refused in
    the same words whatever is at that path.

    Args:
        board_model: the board's `--model` (a name, or a path to serve).
        folders: the folders whose files a game may name.
    """

    NAMES = ("default", "none", *PLAYER_AIS)

    def __init__(self, board_model: str = "default", folders: Iterable[Path] = ()) -> None:
        files = [] if board_model in self.NAMES else [Path(board_model)]
        for size in sorted(SHIPPED_MODELS):
            for shipped in (default_model_path, default_checkpoint_path):
                try:
                    files.append(shipped(size))
                except FileNotFoundError:  # a package installed without it
                    pass
        self.paths = ServedPaths(
            "model", "'default', 'none', 'random', 'greedy', 'classical', the board's --model, "
            "or a model file inside a folder it was started with (--models, --run)",
            exact=files, within=folders)

    def resolve(self, model: str) -> str:
        """What to load for the `model` a request names: the name itself, or the real path.

        Raises:
            BadRequestError: `model` is not a model this board serves (whatever the path is).
        """
        return model if model in self.NAMES else str(self.paths.resolve(model))


class GameSession:
    """One game: the board, its AI, the last analysis, the saved record, and who is waiting.

    Args:
        game_id: the game's name in URLs.
        settings: how the game is played.
        ai: the AI player.
        save_path: the record file this game is written to after every move (None: not saved).
        analyst: the search behind analyses (and the AI's moves when it is the AI); None: the
            AI, which must then be an `MCTSPlayer`.
    """

    def __init__(self, game_id: str, settings: GameSettings, ai: Player,
                 save_path: Path | None, analyst: MCTSPlayer | None = None) -> None:
        self.game_id = game_id
        self.settings = settings
        self.ai = ai
        self.analyst = ai if analyst is None else analyst
        self.save_path = save_path
        self.board = Board.from_moves(settings.opening, start=settings.board)
        self.started = datetime.datetime.now()
        self.busy: str | None = None  # "thinking" (the AI's move) or "analysing", while searching
        self.analysis: dict[str, Any] | None = None
        self.error: str | None = None  # the last failure of the AI or of saving
        self.saved_plies: int | None = None  # plies in the record file after the last write
        self.version = 0  # grows with every change; clients keep the newest state they saw
        self.last_used = time.monotonic()
        self._listeners: set[asyncio.Event] = set()
        self._save_lock = asyncio.Lock()

    # -- whose turn --------------------------------------------------------------------------------

    def is_over(self) -> bool:
        """Whether the side to move has no legal move."""
        return self.board.is_game_over()

    def ai_to_move(self) -> bool:
        """Whether the game goes on and the side to move is the AI's."""
        return not self.is_over() and self.board.turn not in self.settings.human_colors

    def check_idle(self, action: str) -> None:
        """Raise `ConflictError` naming `action` while a search runs."""
        if self.busy is not None:
            raise ConflictError(f"cannot {action}: the AI is {self.busy}; wait for it to finish")

    # -- changes -----------------------------------------------------------------------------------

    def listen(self) -> asyncio.Event:
        """An event set after every change from now on (until `forget`)."""
        event = asyncio.Event()
        self._listeners.add(event)
        return event

    def forget(self, event: asyncio.Event) -> None:
        """Stop setting `event`."""
        self._listeners.discard(event)

    def changed(self) -> None:
        """Count a change and wake every listener."""
        self.version += 1
        self.last_used = time.monotonic()
        for event in self._listeners:
            event.set()

    def play_human(self, move: Move) -> None:
        """Play the human's `move`.

        Raises:
            ConflictError: a search runs, the game is over, or it is the AI's turn.
            BadRequestError: the move is illegal (the engine's reason).
        """
        self.check_idle("move")
        if self.is_over():
            raise ConflictError(f"the game is over ({RESULT_TEXT[self.board.winner()]}); "
                                "start a new game or undo")
        if self.board.turn not in self.settings.human_colors:
            raise ConflictError(f"it is the AI's turn ({COLOR_NAMES[self.board.turn]} to move)")
        if not self.board.is_legal(move):
            try:
                self.board.push(move)  # raises, naming why the move is illegal
            except IllegalMoveError as error:
                raise BadRequestError(str(error)) from None
        self._observe(move)
        self.board.push(move)
        self.error = None
        self.changed()

    def _observe(self, move: Move) -> None:
        """Show `move` (about to be played) to the AI and the analyst: a search keeps its tree
        across turns."""
        self.ai.observe(self.board, move)
        if self.analyst is not self.ai:
            self.analyst.observe(self.board, move)

    def play_ai(self, move: Move, analysis: dict[str, Any] | None) -> None:
        """Play the move the AI chose, keeping its search as the analysis (None: an AI that does
        not search)."""
        self._observe(move)
        self.board.push(move)
        self.analysis = analysis
        self.changed()

    def undo(self) -> list[Move]:
        """Take back moves up to and including the human's last one; return them, last first.

        Against the AI that is the human's move and the AI's reply; on an analysis board (the
        human plays both sides) one move.

        Raises:
            ConflictError: a search runs, or the human has no move to take back.
        """
        self.check_idle("undo")
        history = self.board.move_stack
        first = self.settings.board.first  # ply `index` is played by (first + index) % 2
        last_human = next((index for index in range(len(history) - 1, -1, -1)
                           if (first + index) % 2 in self.settings.human_colors), None)
        if last_human is None:
            raise ConflictError("nothing to undo: no human move has been played")
        taken = [self.board.pop() for _ in range(len(history) - last_human)]
        if self.analysis is not None and self.analysis["ply"] > self.board.ply:
            self.analysis = None
        self.error = None
        self.changed()
        return taken

    # -- searching (on a worker thread) ------------------------------------------------------------

    def search(self, board: Board, kind: str, time_budget: float | None = None,
               simulations: int | None = None) -> tuple[Move, dict[str, Any] | None]:
        """The AI's move at `board` (`kind` "ai-move") or the analyst's search of it ("analysis"),
        and the analysis (None for the move of an AI that does not search). Runs on a worker
        thread.

        `time_budget` or `simulations` replace the game's strength for this search only.
        """
        if kind == "ai-move" and self.ai is not self.analyst:
            return self.ai.choose_move(board), None
        ai = self.analyst
        saved = (ai.time_budget, ai.simulations)
        if time_budget is not None or simulations is not None:
            ai.time_budget = time_budget
            ai.simulations = simulations if simulations is not None else ai.simulations
        try:
            started = time.perf_counter()
            move = ai.choose_move(board)
            seconds = time.perf_counter() - started
        finally:
            ai.time_budget, ai.simulations = saved
        result = ai.search.root_result(0)
        return move, analysis_view(result, ai.last_report, board, kind, seconds)

    # -- the record --------------------------------------------------------------------------------

    def record(self) -> GameRecord:
        """The game so far (Result `*` while unfinished) with where it came from."""
        names = ["human" if color in self.settings.human_colors else self.ai.name
                 for color in (BLACK, WHITE)]
        headers = {"Model": self.settings.model, "Search": self.settings.search_text}
        if self.settings.seed is not None:
            headers["Seed"] = str(self.settings.seed)
        if self.settings.opening:
            headers["Opening"] = str(len(self.settings.opening))
        return GameRecord.from_game(self.board.move_stack, names[BLACK], names[WHITE],
                                    event="web", date=self.started.date().isoformat(),
                                    start=self.settings.board,
                                    Time=self.started.strftime("%H:%M:%S"), **headers)

    async def save(self) -> None:
        """Write the record to `save_path` (replacing the file) off the event loop.

        Nothing is written before the first move; once written, the file follows the board,
        undo included. Writes run one at a time in call order, so the file ends with the newest
        record. A failure is kept in `error` rather than raised: the game goes on.
        """
        if self.save_path is None or (not self.board.ply and self.saved_plies is None):
            return
        record, plies = self.record(), self.board.ply
        async with self._save_lock:
            try:
                await asyncio.to_thread(write_records, self.save_path, [record])
            except OSError as error:
                self.error = f"cannot save the game to {self.save_path}: {error}"
            else:
                self.saved_plies = plies
        self.changed()

    def decided(self) -> dict[str, Any] | None:
        """Who wins, when the unfinished game is provably decided; else None.

        Two proofs count. The engine's adjudication (`Board.adjudicate`): the amazons are
        separated and the move bounds of their regions settle the race; it holds for the position
        on the board whoever reached it. Otherwise a search that has searched every line to the
        end (`SearchResult.proven`): its proof holds for the current position when the analysis
        is of this position, or is the AI's search for the move it has just played (the AI plays
        a proven win's shortest line, and after a proven loss every move still loses).

        Returns:
            `{"winner": "black" | "white", "by": "adjudication", "margin": at least this many
            more moves for the winner, "plies_bound": the game ends within this many plies,
            "text": Adjudication.describe()}`; or `{"winner", "by": "search", "plies": plies to
            the end with best play, "text": "decided: Black wins (proven by the search: ...)"}`;
            or None.
        """
        if self.is_over():
            return None
        adjudication = self.board.adjudicate()
        if adjudication is not None:
            return {"winner": COLOR_NAMES[adjudication.winner], "by": "adjudication",
                    "margin": adjudication.margin, "plies_bound": adjudication.plies_bound,
                    "text": adjudication.describe()}
        analysis = self.analysis
        if analysis is None or not analysis["proven"]:
            return None
        board = self.board
        behind = board.ply - analysis["ply"]
        if behind == 1 and analysis["kind"] == "ai-move":
            board = board.copy()
            board.pop()
        elif behind != 0:
            return None
        if board_squares(board) != analysis["squares"] \
                or COLOR_NAMES[board.turn] != analysis["turn"]:
            return None
        plies = analysis["proof_plies"] - behind
        text = (f"decided: {analysis['winner'].capitalize()} wins (proven by the search: {plies} "
                f"more pl{'y' if plies == 1 else 'ies'} with best play)")
        return {"winner": analysis["winner"], "by": "search", "plies": plies, "text": text}

    def state(self) -> dict[str, Any]:
        """Everything the page shows about the game, as JSON-ready values."""
        board = self.board
        over = self.is_over()
        human_turn = not over and board.turn in self.settings.human_colors
        history = board.move_stack
        return {
            "id": self.game_id,
            "version": self.version,
            "board": board_view(self.settings.board),
            "squares": board_squares(board),
            "position": board.position_string(),
            "turn": COLOR_NAMES[board.turn],
            "ply": board.ply,
            "moves": [move_view(move) for move in history],
            "human": [COLOR_NAMES[color] for color in self.settings.human_colors],
            "ai": {"name": self.ai.name, "model": self.settings.model,
                   "search": self.settings.search_text},
            "busy": self.busy,
            "over": over,
            "winner": None if not over else COLOR_NAMES[board.winner()],
            "result": RESULT_TEXT[board.winner()],
            "legal": legal_move_tree(board) if human_turn and self.busy is None else None,
            "analysis": self.analysis,
            "decided": self.decided(),
            "territory": territory_view(board),
            "error": self.error,
            "saved": None if self.save_path is None else str(self.save_path),
            "saved_plies": self.saved_plies,
            "opening": len(self.settings.opening),
        }


class GameStore:
    """The server's games, and the worker threads their searches run on.

    Args:
        executor: where searches (and model loading, which may import torch) run.
        games_dir: folder for the record files (`web-YYYYMMDD-HHMMSS-ID.txt`); None: no saving.
        max_games: games kept; creating one more drops the least recently used idle game.
        default_model, default_time: what a new game uses when its request does not say.
        torch_threads: torch's intra-op threads once a network model is loaded. Several games
            search at once on the worker threads, so one each is the default (docs/web.md has
            the measurement).
        model_folders: the folders whose model files a game may name (`ServedModels`, with
            `default_model`).
        default_board: the board of a new game whose request names none (a `BoardSpec`, a
            name in `amazons.boards.BOARDS` or a start position string).

    Raises:
        amazons.boards.NotationError: `default_board` is no board.
    """

    def __init__(self, executor: Executor, games_dir: Path | None, max_games: int = 16,
                 default_model: str = "default", default_time: float = 1.0,
                 torch_threads: int = 1, model_folders: Iterable[Path] = (),
                 default_board: BoardSpec | str = DEFAULT_BOARD) -> None:
        self.executor = executor
        self.games_dir = games_dir
        self.max_games = max_games
        self.default_model = default_model
        self.default_time = default_time
        self.default_board = board_spec(default_board)
        self.torch_threads = torch_threads
        self.models = ServedModels(default_model, model_folders)
        self.games: dict[str, GameSession] = {}
        self._tasks: set[asyncio.Task] = set()

    async def _in_worker(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, function, *args)

    def _build_ai(self, settings: GameSettings, model: str) -> tuple[Player, MCTSPlayer]:
        """The game's AI and the search behind its analyses, from `model` (`ServedModels.resolve`
        of the settings' model, which names it) for the board's size; runs on a worker thread (a
        `.pt` checkpoint imports torch). A model's AI is its search and analyses too; a player
        of `PLAYER_AIS` is built by the factory (`classical` with the game's time per move) and
        analyses with rollout MCTS."""
        ai = None
        if model in PLAYER_AIS:
            ai = make_player(model, seed=settings.seed or 0, time_budget=settings.time_budget,
                             board=settings.board)
            model = "none"
        name = None if model == "none" else f"mcts-net:{settings.model}"
        search = build_model_player(model, simulations=settings.simulations,
                                    time_budget=settings.time_budget, seed=settings.seed,
                                    allow_torch=True, torch_threads=self.torch_threads, name=name,
                                    board_size=settings.board.size)
        return (search if ai is None else ai), search

    def get(self, game_id: str) -> GameSession:
        """The game named `game_id`.

        Raises:
            NotFoundError: no such game (never created, deleted, or dropped as the oldest).
        """
        session = self.games.get(game_id)
        if session is None:
            raise NotFoundError(f"unknown game {game_id!r}")
        return session

    async def create(self, body: dict[str, Any]) -> GameSession:
        """A new game from a `POST /api/games` body; the AI starts if it moves first.

        Raises:
            BadRequestError: bad settings, a model the board does not serve (`ServedModels`),
                or one that cannot be loaded or cannot play the board's size (says why, naming
                the model and the size).
        """
        settings = game_settings(body, self.default_model, self.default_time, self.default_board)
        model = self.models.resolve(settings.model)
        try:
            ai, analyst = await self._in_worker(self._build_ai, settings, model)
        except (OSError, ValueError, ImportError) as error:
            raise BadRequestError(f"cannot load the model {settings.model!r}: {error}") from None
        game_id = secrets.token_hex(6)
        save_path = None
        if self.games_dir is not None:
            save_path = (self.games_dir
                         / f"web-{datetime.datetime.now():%Y%m%d-%H%M%S}-{game_id}.txt")
        session = GameSession(game_id, settings, ai, save_path, analyst)
        self._make_room()
        self.games[game_id] = session
        self._start_ai(session)
        return session

    def _make_room(self) -> None:
        idle = sorted((session.last_used, game_id) for game_id, session in self.games.items()
                      if session.busy is None)
        while len(self.games) >= self.max_games and idle:
            del self.games[idle.pop(0)[1]]

    def delete(self, game_id: str) -> None:
        """Forget a game (its record file stays).

        Raises:
            NotFoundError: no such game. ConflictError: its search is running.
        """
        self.get(game_id).check_idle("delete the game")
        del self.games[game_id]

    async def move(self, game_id: str, move: Move) -> dict[str, Any]:
        """Play the human's move and return the state right after it (the AI's reply, when it is
        the AI's turn, has started on a worker thread; the record is written after).

        Raises:
            NotFoundError, ConflictError, BadRequestError: see `GameSession.play_human`.
        """
        session = self.get(game_id)
        session.play_human(move)
        self._start_ai(session)
        state = session.state()
        await session.save()
        return state

    async def undo(self, game_id: str) -> GameSession:
        """Take back the human's last move (and the AI's reply); see `GameSession.undo`."""
        session = self.get(game_id)
        session.undo()
        await session.save()
        return session

    async def analyse(self, game_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Search the current position and return the analysis (also kept in the state).

        Body fields: `time` or `simulations` (default: the game's AI strength).

        Raises:
            NotFoundError: no such game. ConflictError: a search runs or the game is over.
            BadRequestError: a bad field.
        """
        session = self.get(game_id)
        fields = JsonFields(body, SEARCH_FIELDS)
        time_budget, simulations = _search_strength(fields, None)
        session.check_idle("analyse")
        if session.is_over():
            raise ConflictError("the game is over: there is nothing to analyse")
        session.busy = "analysing"
        session.changed()
        try:
            _, analysis = await self._in_worker(session.search, session.board.copy(), "analysis",
                                                time_budget, simulations)
        except Exception as error:
            session.error = f"the analysis failed: {type(error).__name__}: {error}"
            raise
        else:
            session.analysis = analysis
        finally:
            session.busy = None
            session.changed()
        return analysis

    def _start_ai(self, session: GameSession) -> None:
        """Mark the session busy at once (so the caller's answer says so) and let the AI move."""
        if not session.ai_to_move():
            return
        session.busy = "thinking"
        session.changed()
        task = asyncio.get_running_loop().create_task(self._ai_turns(session))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ai_turns(self, session: GameSession) -> None:
        """Let the AI play while it is its turn (on an analysis board: never)."""
        try:
            while session.ai_to_move():
                session.busy = "thinking"
                session.changed()
                try:
                    move, analysis = await self._in_worker(session.search, session.board.copy(),
                                                           "ai-move")
                except Exception as error:  # shown on the page; the human may undo or retry
                    session.error = f"the AI failed: {type(error).__name__}: {error}"
                    return
                session.busy = None
                session.play_ai(move, analysis)
                await session.save()
        finally:
            session.busy = None
            session.changed()

    async def close(self) -> None:
        """Stop the AI loops (a search already on a thread finishes there, unobserved)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
