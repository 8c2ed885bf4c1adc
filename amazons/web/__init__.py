"""The local web board: `python -m amazons.web` (play, analyse, replay, watch a training run).

A command module at the top of the import chain: nothing in the package imports it, and the
package root does not re-export it. It needs the `web` extra (`pip install -e ".[web]"`:
Starlette, uvicorn, websockets).

* `app`: the Starlette app, its routes and websockets (`create_app`, `WebConfig`).
* `games`: game sessions and the store that runs their searches on worker threads.
* `views`: the JSON the page draws (boards, legal moves, analyses, records).
* `library`: record files for replay. `runs`: following a training run directory.
* `inputs`: request errors (each with its HTTP status) and JSON field checks.
* `static/`: the page (plain HTML, CSS and JavaScript modules, no build step).

See `docs/web.md`.
"""

try:
    import starlette  # noqa: F401  (checked first, to name the missing extra)
    import uvicorn  # noqa: F401
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(
        f"the web board needs the 'web' extra ({missing.name} is not installed): "
        "pip install -e '.[web]', or make install", name=missing.name) from missing

from amazons.web.app import STATIC_DIR, WebConfig, create_app  # noqa: E402

__all__ = ["STATIC_DIR", "WebConfig", "create_app"]
