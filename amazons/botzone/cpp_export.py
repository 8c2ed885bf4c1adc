"""The Botzone C++ export: a network and the bot's search as one self-contained C++ source.

Botzone runs Python 3.6 without Numba, so the project's Python bot cannot be uploaded there; one
C++ source compiled with g++ can. `join_sources` joins the native core's parts
(`amazons/native/`, `PARTS`: the rules on bitboards, adjudication, the kernels, the forward pass of
`amazons.neural.numpy_net`, the search of the Python bot with the CPU clock, Botzone's simple and
JSON interaction in `protocol.h`, and `bot.cpp`: the weights, the command line and the main loop)
into one file: the parts in order, their local `#include` lines dropped, the settings block
(`settings_block`: the search's constants from `NET_SEARCH`, the adjudication's budgets from
`amazons.engine`, Botzone's limits and the margin rule from `amazons.players.botzone_limits`,
written from the Python definitions, never typed twice) where the first part includes `settings.h`
(`settings_header` writes the same block as that header, so that each part also compiles alone;
`amazons/native/common.h` says how the parts are joined), and the model block where `bot.cpp` has
its marker: the network's shape (`model_shape()`, from the one mapping
`amazons.neural.numpy_net.native_shape`) and its weights, which are

* embedded (the default): the float32 arrays of `NumpyNet.layout_arrays`, little-endian, as
  base64 text in string literals, so the bot's outputs are npnet's to float32 rounding (the
  tests hold them to 1e-4); with the shipped model the source is about 370 kB;
* or, with `weights_file`, written beside the source as a binary file for Botzone's storage
  (the bot reads `data/<name>`): 8 bytes `AMZW0001`, the weights' SHA-256 as 64 hex characters,
  the float count as 8 bytes little-endian, then the floats. The source keeps the size, the
  SHA-256 and the FNV-1a digest of the floats and refuses a file that does not match.

`compile_command` is the g++ line the docs and the tests use. Imports numpy, `amazons.engine`,
`amazons.players.botzone_limits` and `amazons.neural.numpy_net`, and the search's defaults
(`amazons.players.factory`) when a bot is written (the exporter, `amazons.export`, turns torch
checkpoints into a `NumpyNet` first).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from amazons import engine
from amazons.core.atomic import atomic_write
from amazons.neural.numpy_net import NumpyNet, native_shape
from amazons.players import botzone_limits

__all__ = [
    "LARGE_SOURCE_BYTES",
    "NATIVE_DIR",
    "PARTS",
    "SETTINGS_HEADER",
    "SOURCE_NAME",
    "WEIGHTS_MAGIC",
    "BotzoneExportError",
    "compile_command",
    "fnv1a64",
    "join_sources",
    "settings_block",
    "settings_header",
    "weight_bytes",
    "weights_file_bytes",
    "write_bot",
]

SOURCE_NAME = "bot.cpp"
NATIVE_DIR = Path(__file__).resolve().parent.parent / "native"
# The native core's parts in the order the joined source holds them; each includes those before it.
PARTS = ("common.h", "rules.h", "adjudicate.h", "kernels.h", "network.h", "search.h",
         "protocol.h", "bot.cpp")
# The header the parts include for the settings block: no file of the project (settings_header).
SETTINGS_HEADER = "settings.h"
MODEL_MARKER = "//@MODEL@"
# Botzone takes uploaded sources of a few hundred kB without complaint; past this size the
# exporter suggests keeping the weights in a file (--weights-file) instead.
LARGE_SOURCE_BYTES = 1 << 20
WEIGHTS_MAGIC = b"AMZW0001"
BASE64_LINE = 120  # characters of base64 per string literal line


class BotzoneExportError(ValueError):
    """The C++ bot cannot be written: a network it cannot run, a bad weights-file name or an
    unusable template."""


def weight_bytes(net: NumpyNet) -> bytes:
    """The network's weights as the C++ bot reads them: `layout_arrays` as float32 little-endian."""
    return b"".join(array.astype("<f4").tobytes() for _, array in net.layout_arrays())


def fnv1a64(data: bytes) -> int:
    """FNV-1a, 64 bits, of `data` (the C++ bot's digest of its weights)."""
    words = np.frombuffer(data, np.uint8)
    value = 0xCBF29CE484222325
    for byte in words.tolist():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def weights_file_bytes(net: NumpyNet) -> bytes:
    """The weights file of `--weights-file`: magic, SHA-256 (hex), float count, floats."""
    payload = weight_bytes(net)
    digest = hashlib.sha256(payload).hexdigest().encode("ascii")
    return WEIGHTS_MAGIC + digest + (len(payload) // 4).to_bytes(8, "little") + payload


def comment_text(text: str) -> str:
    """`text` made safe inside one `//` comment line: printable ASCII on one line, no backslash (a
    trailing one would continue the comment onto the next source line) and no `??` (a trigraph
    under -std=c++11: `??/` is a backslash)."""
    safe = "".join(c if " " <= c <= "~" else " " for c in str(text)).replace("\\", "/")
    while "??" in safe:
        safe = safe.replace("??", "?-?")
    return " ".join(safe.split())


def _describe_source(source: dict) -> str:
    """`key=value, ...` of where the weights came from (one comment line in the source)."""
    return comment_text(", ".join(f"{key}={value}" for key, value in sorted(source.items()))
                        or "unknown")


def _cpp_double(value: float) -> str:
    """A C++ double literal that reads back as exactly `value`."""
    text = repr(float(value))
    if not np.isfinite(float(value)):
        raise BotzoneExportError(f"a search setting must be finite, got {value!r}")
    return text if any(c in text for c in ".e") else text + ".0"


def settings_block(search: Any = None) -> str:
    """The C++ constants the native core shares with Python, written from the Python definitions.

    Args:
        search: the bot's search (`amazons.mcts.SearchConfig`); None: the network players'
            defaults, `amazons.players.factory.NET_SEARCH`, read when called.

    Returns:
        C++ definitions: the search's c_puct, its base, the FPU reduction, LCB's candidate
        fraction, width and whether it is on, the adjudication's budgets of `amazons.engine`,
        and Botzone's limits with the bot's margin rule and tree size
        (`amazons.players.botzone_limits`).
    """
    if search is None:
        # the search's defaults; loads the search (Numba) lazily
        from amazons.players import factory as player_factory

        search = player_factory.NET_SEARCH
    lines = [
        "// Settings written by the exporter from the Python definitions"
        " (amazons.botzone.cpp_export.settings_block).",
        f"static const double C_PUCT = {_cpp_double(search.c_puct)};  // SearchConfig.c_puct",
        f"static const double C_PUCT_BASE = {_cpp_double(search.c_puct_base)};"
        "  // SearchConfig.c_puct_base",
        f"static const double FPU_REDUCTION = {_cpp_double(search.fpu_reduction)};"
        "  // SearchConfig.fpu_reduction",
        "static const double LCB_MIN_VISITS_FRACTION = "
        f"{_cpp_double(search.lcb_min_visits_fraction)};"
        "  // SearchConfig.lcb_min_visits_fraction",
        f"static const double LCB_STDEVS = {_cpp_double(search.lcb_stdevs)};"
        "  // SearchConfig.lcb_stdevs",
        f"static const bool LCB_DEFAULT = {'true' if search.lcb else 'false'};"
        "  // SearchConfig.lcb",
        f"static const int EXACT_FILL_MAX_SQUARES = {int(engine.EXACT_FILL_SQUARES)};"
        "  // engine.EXACT_FILL_SQUARES",
        f"static const int EXACT_FILL_NODE_BUDGET = {int(engine.EXACT_FILL_NODES)};"
        "  // engine.EXACT_FILL_NODES",
        f"static const int FILL_TABLE_SIZE = {int(engine.FILL_TABLE_ENTRIES)};"
        "  // engine.FILL_TABLE_ENTRIES",
        f"static const int MAX_EXACT_FILL_MOVES = {int(engine.EXACT_FILL_MOVES)};"
        "  // engine.EXACT_FILL_MOVES",
        "static const double TURN_SECONDS = "
        f"{_cpp_double(botzone_limits.LANGUAGE_TURN_SECONDS['cpp'])};"
        "  // botzone_limits: Botzone's CPU seconds a C++ turn, and a JSON time_limit's meaning",
        f"static const double FIRST_TURN_FACTOR = {_cpp_double(botzone_limits.FIRST_TURN_FACTOR)};"
        "  // botzone_limits: the first turn of a game gets this many turns' time",
        f"static const double MARGIN_SECONDS = {_cpp_double(botzone_limits.CPP_MARGIN_SECONDS)};"
        "  // botzone_limits.CPP_MARGIN_SECONDS: kept back from every allowance (--margin)",
        f"static const double MARGIN_FRACTION = {_cpp_double(botzone_limits.MARGIN_FRACTION)};"
        "  // botzone_limits.MARGIN_FRACTION: the most of an allowance a margin keeps back",
        f"static const double TREE_MB_DEFAULT = {_cpp_double(botzone_limits.CPP_TREE_MIB)};"
        "  // botzone_limits.CPP_TREE_MIB: the search tree's MiB (--tree-mb)",
    ]
    return "\n".join(lines)


def settings_header(search: Any = None) -> str:
    """`settings.h`: `settings_block(search)` as a header, for compiling a native part alone (the
    export writes the block inline instead; no such file is kept in the project)."""
    guard = "AMZ_SETTINGS_H"
    return f"#ifndef {guard}\n#define {guard}\n\n{settings_block(search)}\n\n#endif  // {guard}\n"


def _include_name(line: str) -> str | None:
    """The file of a local `#include "name"` line, else None."""
    stripped = line.strip()
    if stripped.startswith("#include") and stripped.endswith('"') and stripped.count('"') == 2:
        return stripped.split('"')[1]
    return None


def join_sources(model_block: str, settings: str, native_dir: Path = NATIVE_DIR) -> str:
    """The native core's parts joined into one source: `bot.cpp`'s leading comment first, then each
    part of `PARTS` in order without its local includes, `settings` where the first part includes
    `SETTINGS_HEADER`, and `model_block` at `bot.cpp`'s marker.

    Raises:
        BotzoneExportError: a part is missing, includes a file that is not an earlier part, or
            `bot.cpp` lacks its one marker.
    """
    texts = {}
    for name in PARTS:
        path = native_dir / name
        try:
            texts[name] = path.read_text(encoding="utf-8")
        except OSError as error:
            raise BotzoneExportError(f"{path}: the native part cannot be read ({error})") from None
    bot = texts[PARTS[-1]]
    if bot.count(MODEL_MARKER) != 1:
        raise BotzoneExportError(f"{native_dir / PARTS[-1]}: expected one {MODEL_MARKER} line")
    lines = bot.split("\n")
    lead = 0
    while lead < len(lines) and (lines[lead].startswith("//") or not lines[lead].strip()):
        lead += 1
    header, texts[PARTS[-1]] = "\n".join(lines[:lead]), "\n".join(lines[lead:])
    out = [header.rstrip("\n") + "\n"]
    settings_written = False
    for index, name in enumerate(PARTS):
        out.append(f"// ==== amazons/native/{name} " + "=" * max(0, 80 - len(name)))
        for line in texts[name].split("\n"):
            included = _include_name(line)
            if included is None:
                out.append(line.replace(MODEL_MARKER, model_block) if line.strip() == MODEL_MARKER
                           else line)
            elif included == SETTINGS_HEADER:
                if not settings_written:
                    out.append(settings)
                    settings_written = True
            elif included not in PARTS[:index]:
                raise BotzoneExportError(f"amazons/native/{name} includes {included}, "
                                         "which is not a part before it")
    return "\n".join(out).rstrip("\n") + "\n"


def _model_shape_function(net: NumpyNet) -> list[str]:
    """`model_shape()`, the network's `NetShape` in C++: the fields of
    `amazons.neural.numpy_net.native_shape`."""
    try:
        shape = native_shape(net.config, net.trunk_layers)
    except ValueError as error:
        raise BotzoneExportError(f"the C++ bot cannot run this network: {error}") from None
    lines = ["static NetShape model_shape() {", "    NetShape shape;"]
    for name, value in shape.items():
        if name != "trunk":
            text = ("true" if value else "false") if isinstance(value, bool) else str(int(value))
            lines.append(f"    shape.{name} = {text};")
    lines += [f"    shape.trunk.push_back({code});" for code in shape["trunk"]]
    return [*lines, "    return shape;", "}"]


def _model_block(net: NumpyNet, payload: bytes, weights_file: str | None) -> str:
    """The C++ definitions that replace `MODEL_MARKER` in the template."""
    lines = [
        f"// {net.policy_head} policy head"
        f"{' with the arrow source term' if net.has_arrow_source else ''}, "
        f"trunk {' '.join(net.trunk_layers)}; "
        f"source: {_describe_source(net.source)}",
        *_model_shape_function(net),
        f"static const unsigned long WEIGHT_FLOATS = {len(payload) // 4}UL;",
        f'static const char MODEL_SHA256[] = "{hashlib.sha256(payload).hexdigest()}";',
        f"static const unsigned long long WEIGHTS_FNV1A = 0x{fnv1a64(payload):016x}ULL;",
    ]
    if weights_file is None:
        text = base64.b64encode(payload).decode("ascii")
        chunks = [text[i:i + BASE64_LINE] for i in range(0, len(text), BASE64_LINE)]
        lines += [
            "#define AMZ_WEIGHTS_EMBEDDED 1",
            'static const char WEIGHTS_DEFAULT_PATH[] = "";',
            "static const char WEIGHTS_BASE64[] =",
            *(f'    "{chunk}"' for chunk in chunks[:-1]),
            f'    "{chunks[-1]}";',
        ]
    else:
        lines += [
            "#define AMZ_WEIGHTS_EMBEDDED 0",
            f'static const char WEIGHTS_FILE_NAME[] = "{weights_file}";',
            f'static const char WEIGHTS_DEFAULT_PATH[] = "data/{weights_file}";',
        ]
    return "\n".join(lines)


def _check_weights_name(name: str) -> str:
    if (not name or name in (".", "..") or any(c in name for c in '/\\"\n\r')
            or not name.isprintable()):
        raise BotzoneExportError(f"--weights-file {name!r}: expected a plain file name, "
                                 "like amazons.bin")
    if name == SOURCE_NAME:
        raise BotzoneExportError(f"--weights-file {name!r}: that is the source's own name")
    return name


def write_bot(net: NumpyNet, directory: str | os.PathLike, weights_file: str | None = None,
              search: Any = None) -> list[Path]:
    """Write `DIR/bot.cpp` for `net` (and `DIR/<weights_file>` when given); returns the paths.

    Args:
        net: the network (`amazons.neural.numpy_net.load_model`, or a `NumpyNet` built from a
            checkpoint).
        directory: where to write (created if missing).
        weights_file: None embeds the weights in the source; a plain file name writes them to
            that file beside it instead (upload it to Botzone's storage; the bot reads
            `data/<name>`).
        search: the bot's search settings (`SearchConfig`); None: `NET_SEARCH`, the network
            players' (`settings_block`).

    Raises:
        BotzoneExportError: a bad `weights_file` name, or the native parts cannot be joined.
        OSError: the files cannot be written.
    """
    if weights_file is not None:
        weights_file = _check_weights_name(weights_file)
    payload = weight_bytes(net)
    source = join_sources(_model_block(net, payload, weights_file), settings_block(search))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = [atomic_write(directory / SOURCE_NAME,
                            lambda stream: stream.write(source.encode("utf-8")))]
    if weights_file is not None:
        blob = weights_file_bytes(net)
        written.append(atomic_write(directory / weights_file, lambda stream: stream.write(blob)))
    for path in written:
        path.chmod(0o644)  # atomic_write's temporary file is private to its owner
    return written


def compile_command(source: str | os.PathLike, binary: str | os.PathLike, standard: str = "c++11",
                    optimize: str = "-O2") -> list[str]:
    """The g++ command that builds the bot as Botzone does (`-D_BOTZONE_ONLINE`), warnings on."""
    return ["g++", f"-std={standard}", optimize, "-Wall", "-Wextra", "-D_BOTZONE_ONLINE",
            "-o", str(binary), str(source)]
