"""The web board's ASGI app: HTTP routes, websockets, static files (Starlette).

    GET  /                          the page (amazons/web/static/index.html)
    GET  /api/info                  server defaults: model, model folders, time per move, ...
    POST /api/games                 new game {side, model, time | simulations, seed, board, moves}
                                    -> state (model: one the board serves, games.ServedModels;
                                    board: botzone8, standard10, openspiel6 or a start string)
    GET  /api/games                 the games the server holds (id, ply, turn, busy)
    GET  /api/games/{id}            state
    POST /api/games/{id}/move       {move: "d8-d4/f6" | "3 0 3 4 5 2"} (the game's board size)
                                    -> state (AI replies later)
    POST /api/games/{id}/undo       take back the human's last move and the AI's reply -> state
    POST /api/games/{id}/analyse    {time | simulations} -> analysis of the current position
    GET  /api/games/{id}/record     the game in the record format (text/plain)
    DELETE /api/games/{id}          forget the game
    WS   /api/games/{id}/ws         pushes {"type": "state", "state": ...} on every change
    POST /api/records               {path | text, game} -> game summaries, or one game to replay
                                    (path: a record file the board serves, library.RecordLibrary)
    GET  /api/runs?dir=RUN_DIR      a training run's snapshot (metrics, ladder, newest games)
    WS   /api/runs/ws?dir=RUN_DIR   pushes {"type": "run", "run": ...} when the run's files change
                                    (dir: the board's --run folder, runs.served_run_dirs)

Every refused request gets a 4xx answer `{"error": "..."}` that names what was wrong and changes
nothing (`amazons.web.inputs`); an unexpected failure is a 500 with the same shape. A path a
request names (a model, a record file, a run directory) is one the board was started with, or is
refused in the same words whatever is there (`inputs.ServedPaths`). Searches and file parsing
run on worker threads; the event loop only moves data.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from amazons import __version__
from amazons.board import COLOR_NAMES
from amazons.boards import BOARDS, DEFAULT_BOARD
from amazons.mcts import warm_up
from amazons.web.games import GameStore
from amazons.web.inputs import BadRequestError, JsonFields, WebError, parse_json_object, parse_move
from amazons.web.library import RecordLibrary
from amazons.web.runs import RunWatcher, served_run_dirs
from amazons.web.views import board_view

__all__ = ["LOOPBACK_HOSTS", "STATIC_DIR", "WebConfig", "create_app"]

STATIC_DIR = Path(__file__).resolve().parent / "static"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class WebConfig:
    """Settings of one server; the command line fills it, `create_app` receives it."""

    model: str = "default"  # the AI of a new game unless it names one: default, none or a path
    # folders whose model files a game may name, besides run_dir's (games.ServedModels)
    model_dirs: tuple[Path, ...] = ()
    # folders whose record files the replay view may name, besides games_dir's, run_dir's and
    # model_dirs' (library.RecordLibrary)
    record_dirs: tuple[Path, ...] = ()
    time_per_move: float = 1.0  # seconds per AI move unless a new game says otherwise
    board: str = DEFAULT_BOARD  # the board of a new game unless it names one (amazons.boards)
    games_dir: Path | None = Path("games")  # where each game's record file goes (None: not saved)
    max_games: int = 16  # games held; a new one drops the least recently used idle game
    search_threads: int = 2  # worker threads for searches (games search in parallel up to this)
    torch_threads: int = 1  # torch's intra-op threads once a network model is loaded
    poll_seconds: float = 1.0  # how often a watched run directory is looked at
    run_dir: str | None = None  # the run directory the page opens in, and may watch
    replay: str | None = None  # a record file the page opens in the replay view (served)
    warm_up: bool = True  # compile (or load) the search kernels before serving
    allowed_hosts: tuple[str, ...] | None = None  # Host headers served (None: any); the command
    #   line gives a loopback server LOOPBACK_HOSTS, so a web page cannot rebind a name onto it


class SameOriginOnly:
    """Refuses what another web site's page could send: a request that changes something, or a
    websocket, whose `Origin` is not this server (403, or a websocket closed with 4403).

    Requests without `Origin` (curl, scripts) and reads (GET, HEAD) pass.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            changes = scope["type"] == "websocket" or scope["method"] not in ("GET", "HEAD")
            if origin and changes and urlsplit(origin).netloc != headers.get("host"):
                message = f"cross-site request from {origin} refused"
                if scope["type"] == "http":
                    await JSONResponse({"error": message}, status_code=403)(scope, receive, send)
                else:
                    await WebSocket(scope, receive, send).close(code=4403, reason=message)
                return
        await self.app(scope, receive, send)


async def _body(request: Request) -> dict[str, Any]:
    return parse_json_object(await request.body())


def _error(request: Request, error: Exception) -> JSONResponse:
    if isinstance(error, WebError):
        return JSONResponse({"error": str(error)}, status_code=error.status)
    if isinstance(error, HTTPException):
        return JSONResponse({"error": error.detail}, status_code=error.status_code)
    return JSONResponse({"error": f"internal error: {type(error).__name__}: {error}"},
                        status_code=500)


async def _push_updates(websocket: WebSocket,
                        next_message: Callable[[], Awaitable[dict[str, Any] | None]]) -> None:
    """Send what `next_message` produces (skipping None) until the client goes away.

    Messages from the client are read and ignored, so a disconnect is noticed at once even while
    `next_message` is waiting.
    """
    receive: asyncio.Future = asyncio.ensure_future(websocket.receive())
    produce: asyncio.Future | None = None
    try:
        while True:
            if produce is None:
                produce = asyncio.ensure_future(next_message())
            done, _ = await asyncio.wait({receive, produce}, return_when=asyncio.FIRST_COMPLETED)
            if produce in done:
                message, produce = produce.result(), None
                if message is not None:
                    await websocket.send_json(message)
            if receive in done:
                if receive.result()["type"] == "websocket.disconnect":
                    return
                receive = asyncio.ensure_future(websocket.receive())
    except (WebSocketDisconnect, OSError, RuntimeError):
        return  # the client went away while a message was being sent
    finally:
        for future in (receive, produce):
            if future is not None:
                future.cancel()


async def _refuse_socket(websocket: WebSocket, error: WebError) -> None:
    await websocket.send_json({"type": "error", "error": str(error), "status": error.status})
    await websocket.close(code=4000 + error.status)


def create_app(config: WebConfig | None = None) -> Starlette:
    """The web board's Starlette app (serve it with uvicorn; see `amazons.web.__main__`)."""
    config = config or WebConfig()
    executor = ThreadPoolExecutor(max_workers=config.search_threads,
                                  thread_name_prefix="amazons-search")
    run_folders = [Path(config.run_dir)] if config.run_dir else []
    model_folders = [*config.model_dirs, *run_folders]
    record_folders = [*config.record_dirs, *([config.games_dir] if config.games_dir else []),
                      *run_folders, *config.model_dirs]
    store = GameStore(executor, config.games_dir, config.max_games, config.model,
                      config.time_per_move, config.torch_threads, model_folders,
                      default_board=config.board)
    library = RecordLibrary(files=[config.replay] if config.replay else [],
                            folders=record_folders)
    runs = served_run_dirs(run_folders)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if config.warm_up:
            await asyncio.get_running_loop().run_in_executor(executor, warm_up)
        try:
            yield
        finally:
            await store.close()
            executor.shutdown(wait=False, cancel_futures=True)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html")

    async def info(request: Request) -> Response:
        return JSONResponse({
            "version": __version__,
            "model": config.model,
            "model_dirs": [str(folder) for folder in model_folders],
            "record_dirs": [str(folder) for folder in record_folders],
            "time_per_move": config.time_per_move,
            "boards": [board_view(spec) for spec in BOARDS.values()],
            "board": store.default_board.label(),
            "games_dir": None if config.games_dir is None else str(config.games_dir),
            "run_dir": config.run_dir,
            "replay": config.replay,
        })

    async def new_game(request: Request) -> Response:
        session = await store.create(await _body(request))
        return JSONResponse(session.state(), status_code=201)

    async def list_games(request: Request) -> Response:
        return JSONResponse([
            {"id": session.game_id, "ply": session.board.ply, "over": session.is_over(),
             "busy": session.busy,
             "human": [COLOR_NAMES[color] for color in session.settings.human_colors]}
            for session in store.games.values()
        ])

    async def game_state(request: Request) -> Response:
        return JSONResponse(store.get(request.path_params["game_id"]).state())

    async def delete_game(request: Request) -> Response:
        store.delete(request.path_params["game_id"])
        return Response(status_code=204)

    async def play_move(request: Request) -> Response:
        game_id = request.path_params["game_id"]
        size = store.get(game_id).board.size  # an unknown game is a 404 even when the body is bad
        fields = JsonFields(await _body(request), ("move",))
        if "move" not in fields:
            raise BadRequestError("field 'move' is missing, e.g. {\"move\": \"d8-d4/f6\"}")
        return JSONResponse(await store.move(game_id, parse_move(fields.values["move"],
                                                                 size=size)))

    async def undo(request: Request) -> Response:
        game_id = request.path_params["game_id"]
        store.get(game_id)
        JsonFields(await _body(request), ())
        return JSONResponse((await store.undo(game_id)).state())

    async def analyse(request: Request) -> Response:
        game_id = request.path_params["game_id"]
        store.get(game_id)
        return JSONResponse(await store.analyse(game_id, await _body(request)))

    async def record(request: Request) -> Response:
        session = store.get(request.path_params["game_id"])
        filename = f"amazons-{session.game_id}.txt"
        return PlainTextResponse(session.record().to_text() + "\n", headers={
            "Content-Disposition": f'attachment; filename="{filename}"'})

    async def game_socket(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            session = store.get(websocket.path_params["game_id"])
        except WebError as error:
            await _refuse_socket(websocket, error)
            return
        changed = session.listen()
        first = True

        async def next_state() -> dict[str, Any]:
            nonlocal first
            if not first:
                await changed.wait()
            first = False
            changed.clear()
            return {"type": "state", "state": session.state()}

        try:
            await _push_updates(websocket, next_state)
        finally:
            session.forget(changed)

    async def records(request: Request) -> Response:
        body = await _body(request)
        return JSONResponse(await asyncio.to_thread(library.answer, body))

    def _run_dir(params: Any) -> Path:
        run_dir = params.get("dir")
        if not run_dir:
            raise BadRequestError("query parameter 'dir' (the run directory) is missing")
        return runs.resolve(run_dir)

    async def run_snapshot(request: Request) -> Response:
        watcher = RunWatcher(_run_dir(request.query_params))
        return JSONResponse(await asyncio.to_thread(watcher.snapshot))

    async def run_socket(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            watcher = RunWatcher(_run_dir(websocket.query_params))
        except WebError as error:
            await _refuse_socket(websocket, error)
            return
        first = True

        async def next_snapshot() -> dict[str, Any] | None:
            nonlocal first
            if not first:
                await asyncio.sleep(config.poll_seconds)
            first = False
            snapshot = await asyncio.to_thread(watcher.poll)
            return None if snapshot is None else {"type": "run", "run": snapshot}

        await _push_updates(websocket, next_snapshot)

    routes = [
        Route("/", index),
        Route("/api/info", info),
        Route("/api/games", new_game, methods=["POST"]),
        Route("/api/games", list_games, methods=["GET"]),
        Route("/api/games/{game_id}", game_state, methods=["GET"]),
        Route("/api/games/{game_id}", delete_game, methods=["DELETE"]),
        Route("/api/games/{game_id}/move", play_move, methods=["POST"]),
        Route("/api/games/{game_id}/undo", undo, methods=["POST"]),
        Route("/api/games/{game_id}/analyse", analyse, methods=["POST"]),
        Route("/api/games/{game_id}/record", record, methods=["GET"]),
        WebSocketRoute("/api/games/{game_id}/ws", game_socket),
        Route("/api/records", records, methods=["POST"]),
        Route("/api/runs", run_snapshot, methods=["GET"]),
        WebSocketRoute("/api/runs/ws", run_socket),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    middleware = [Middleware(SameOriginOnly)]
    if config.allowed_hosts is not None:
        middleware.insert(0, Middleware(TrustedHostMiddleware,
                                        allowed_hosts=list(config.allowed_hosts)))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware,
                    exception_handlers={WebError: _error, HTTPException: _error, Exception: _error})
    app.state.store = store
    app.state.config = config
    return app
