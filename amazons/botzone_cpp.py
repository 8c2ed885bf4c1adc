"""The Botzone C++ export: a network and the bot's search as one self-contained C++ source.

Botzone runs Python 3.6 without Numba, so the project's Python bot cannot be uploaded there; one
C++ source compiled with g++ can. `write_bot` fills the template `amazons/botzone_bot.cpp.in`
(the rules on bitboards, the forward pass of `amazons.npnet`, the search of the Python bot,
Botzone's simple and JSON interaction, the CPU clock) with a model block: the network's shape
as constants and its weights, which are

* embedded (the default): the float32 arrays of `NumpyNet.layout_arrays`, little-endian, as
  base64 text in string literals, so the bot's outputs are npnet's to float32 rounding (the
  tests hold them to 1e-4); with the shipped model the source is about 370 kB;
* or, with `weights_file`, written beside the source as a binary file for Botzone's storage
  (the bot reads `data/<name>`): 8 bytes `AMZW0001`, the weights' SHA-256 as 64 hex characters,
  the float count as 8 bytes little-endian, then the floats. The source keeps the size, the
  SHA-256 and the FNV-1a digest of the floats and refuses a file that does not match.

`compile_command` is the g++ line the docs and the tests use. Imports numpy and `amazons.npnet`
only (the exporter, `amazons.export`, turns torch checkpoints into a `NumpyNet` first).
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import numpy as np

from amazons._atomic import atomic_write
from amazons.npnet import NumpyNet

__all__ = [
    "SOURCE_NAME",
    "TEMPLATE_PATH",
    "WEIGHTS_MAGIC",
    "BotzoneExportError",
    "compile_command",
    "fnv1a64",
    "weight_bytes",
    "weights_file_bytes",
    "write_bot",
]

SOURCE_NAME = "bot.cpp"
TEMPLATE_PATH = Path(__file__).resolve().parent / "botzone_bot.cpp.in"
MODEL_MARKER = "//@MODEL@"
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


def _describe_source(source: dict) -> str:
    """`key=value, ...` of where the weights came from (one comment line in the source)."""
    return ", ".join(f"{key}={value}" for key, value in sorted(source.items())) or "unknown"


def _model_block(net: NumpyNet, payload: bytes, weights_file: str | None) -> str:
    """The C++ definitions that replace `MODEL_MARKER` in the template."""
    trunk_kinds = ", ".join("0" if kind == "residual" else "1" for kind in net.trunk_layers)
    config = net.config
    lines = [
        f"// {net.policy_head} policy head, trunk {' '.join(net.trunk_layers)}; "
        f"source: {' '.join(_describe_source(net.source).split())}",
        f"static const int NUM_PLANES = {net.num_planes};",
        f"static const int CHANNELS = {int(config['channels'])};",
        f"static const int KEY_DIM = {int(config['attention_dim'])};",
        f"static const int HEAD_DIM = {int(config['head_dim'])};",
        f"static const int VALUE_CHANNELS = {int(config['value_channels'])};",
        f"static const int VALUE_HIDDEN = {int(config['value_hidden'])};",
        f"static const int POLICY_JOINT = {1 if net.policy_head == 'joint' else 0};",
        f"static const int TRUNK_LAYERS = {len(net.trunk_layers)};",
        f"static const int TRUNK_KINDS[TRUNK_LAYERS + 1] = {{{trunk_kinds}, -1}};  // 0 residual, 1 attention",
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
    if not name or name in (".", "..") or any(c in name for c in '/\\"\n\r') or not name.isprintable():
        raise BotzoneExportError(f"--weights-file {name!r}: expected a plain file name, like amazons.bin")
    if name == SOURCE_NAME:
        raise BotzoneExportError(f"--weights-file {name!r}: that is the source's own name")
    return name


def write_bot(net: NumpyNet, directory: str | os.PathLike, weights_file: str | None = None) -> list[Path]:
    """Write `DIR/bot.cpp` for `net` (and `DIR/<weights_file>` when given); returns the paths.

    Args:
        net: the network (`amazons.npnet.load_model`, or a `NumpyNet` built from a checkpoint).
        directory: where to write (created if missing).
        weights_file: None embeds the weights in the source; a plain file name writes them to
            that file beside it instead (upload it to Botzone's storage; the bot reads
            `data/<name>`).

    Raises:
        BotzoneExportError: a network with the arrow source term (the template has no forward
            pass for it), a bad `weights_file` name, or the template lacks its marker.
        OSError: the files cannot be written.
    """
    if net.has_arrow_source:
        raise BotzoneExportError("the C++ bot has no arrow source term: export a network with net.arrow_source=false")
    if weights_file is not None:
        weights_file = _check_weights_name(weights_file)
    template = TEMPLATE_PATH.read_text(encoding="utf-8")
    if template.count(MODEL_MARKER) != 1:
        raise BotzoneExportError(f"{TEMPLATE_PATH}: expected one {MODEL_MARKER} line")
    payload = weight_bytes(net)
    source = template.replace(MODEL_MARKER, _model_block(net, payload, weights_file))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = [atomic_write(directory / SOURCE_NAME, lambda stream: stream.write(source.encode("utf-8")))]
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
