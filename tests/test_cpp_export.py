"""The Botzone C++ export (`amazons.botzone.cpp_export`, `python -m amazons.export MODEL --botzone
DIR`): the parts it joins, the source it writes, the weights file and what it refuses.

Helpers and the compiled bot: `tests/cpp_bot.py`, `default_bot` in `tests/conftest.py`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cpp_bot import FAST, NEEDS_GXX, build, first_input
from floats import assert_same_weights, weights_mismatch
from test_npnet import random_model

from amazons.board import Board, Move
from amazons.botzone import cpp_export
from amazons.botzone.cpp_export import (
    NATIVE_DIR,
    PARTS,
    SOURCE_NAME,
    BotzoneExportError,
    join_sources,
    weights_file_bytes,
    write_bot,
)
from amazons.export import main, model_arrays
from amazons.models import default_model_path
from amazons.neural import numpy_net

pytestmark = NEEDS_GXX


def test_the_export_joins_every_part_of_the_bot_in_order():
    # Every C++ file of amazons/native/ is a part of the bot but the extension's evaluator.h, and
    # the joined source holds each part once, in PARTS' order, protocol.h before bot.cpp.
    native = {path.name for path in NATIVE_DIR.iterdir() if path.suffix in (".h", ".cpp")}
    assert native == {*PARTS, "evaluator.h"}
    assert PARTS[0] == "common.h" and PARTS[-2:] == ("protocol.h", "bot.cpp")
    source = join_sources("", "")
    starts = [source.index(f"// ==== amazons/native/{name} ") for name in PARTS]
    assert starts == sorted(starts)
    assert source.count("#define AMZ_PROTOCOL_H") == 1 and '#include "' not in source


@pytest.mark.slow
def test_compiles_without_warnings_under_a_current_standard(tmp_path):
    write_bot(numpy_net.load_model(default_model_path()), tmp_path)
    binary = build(tmp_path, "c++17", "-O1")
    result = subprocess.run([str(binary), "--perft", "1"], capture_output=True, text=True,
                            check=True)
    assert result.stdout == "1232\n"


# ------------------------------------------------------------------------------------------------
# The weights


@pytest.mark.slow
def test_weights_file_mode_and_its_errors(tmp_path):
    net = numpy_net.load_model(default_model_path())
    written = write_bot(net, tmp_path, weights_file="amazons.bin")
    assert [path.name for path in written] == [SOURCE_NAME, "amazons.bin"]
    source = (tmp_path / SOURCE_NAME).read_text()
    assert "static const char WEIGHTS_BASE64[]" not in source
    assert "#define AMZ_WEIGHTS_EMBEDDED 0" in source
    binary = build(tmp_path, optimize="-O1")
    play = {"input": first_input([None], [], use_json=False), "capture_output": True,
            "text": True, "timeout": 30, "cwd": tmp_path, "check": False}
    result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
    assert result.returncode == 2 and "weights file data/amazons.bin is missing" in result.stderr
    (tmp_path / "data").mkdir()
    stored = tmp_path / "data" / "amazons.bin"
    blob = weights_file_bytes(net)
    stored.write_bytes(blob)
    result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
    assert result.returncode == 0 and Board().is_legal(Move.from_botzone(result.stdout.strip()))
    damages = ((blob[:-8], f"has {len(blob) - 8} bytes; this bot expects {len(blob)}"),
               (blob[:100] + bytes([blob[100] ^ 1]) + blob[101:], "does not match its digest"),
               (b"XXXXXXXX" + blob[8:], "not an amazons weights file"))
    for damaged, message in damages:
        stored.write_bytes(damaged)
        result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
        assert result.returncode == 2 and result.stdout == "", result.stdout
        assert message in result.stderr, result.stderr
    other = random_model("tiny", "joint", seed=9)
    stored.write_bytes(weights_file_bytes(numpy_net.NumpyNet(*model_arrays(other))))
    result = subprocess.run([str(binary), *FAST, "--restart-per-turn"], **play)
    assert result.returncode == 2 and "this bot was exported for" in result.stderr
    os.remove(stored)
    result = subprocess.run([str(binary), "--weights", str(tmp_path / "amazons.bin"), *FAST,
                             "--restart-per-turn"], **play)
    assert result.returncode == 0, result.stderr


def test_a_bot_with_embedded_weights_refuses_a_weights_file(default_bot, tmp_path):
    result = subprocess.run([str(default_bot), "--weights", str(tmp_path / "amazons.bin"), *FAST,
                             "--restart-per-turn"], input=first_input([None], [], use_json=False),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert "--weights: this bot's weights are embedded" in result.stderr, result.stderr


# ------------------------------------------------------------------------------------------------
# The exporter


def test_the_exporter_refuses_what_it_cannot_write(tmp_path, capsys):
    # nothing to write; OUT for a numpy model; a file without --botzone
    for argv in (["default"], ["default", str(tmp_path / "x.npz")],
                 ["default", "--weights-file", "w.bin"]):
        with pytest.raises(SystemExit):
            main(argv)
    with pytest.raises(BotzoneExportError, match="plain file name"):
        write_bot(numpy_net.load_model(default_model_path()), tmp_path,
                  weights_file="../escape.bin")
    assert main([str(tmp_path / "missing.npz"), "--botzone", str(tmp_path)]) == 2
    assert "missing.npz" in capsys.readouterr().err


def test_the_exporter_suggests_a_weights_file_for_a_large_source(tmp_path, capsys, monkeypatch):
    assert main(["default", "--botzone", str(tmp_path / "small")]) == 0
    assert "--weights-file" not in capsys.readouterr().out  # the shipped model's source is small
    monkeypatch.setattr(cpp_export, "LARGE_SOURCE_BYTES", 100_000)
    assert main(["default", "--botzone", str(tmp_path / "large")]) == 0
    out = capsys.readouterr().out
    assert "note: the source is" in out and "--weights-file NAME" in out, out
    assert main(["default", "--botzone", str(tmp_path / "file"), "--weights-file",
                 "amazons.bin"]) == 0
    assert "note:" not in capsys.readouterr().out


def test_a_checkpoint_exports_the_same_bot_as_its_numpy_model(tmp_path, capsys):
    checkpoint = default_model_path().with_suffix(".pt")
    assert main([str(checkpoint), "--botzone", str(tmp_path / "pt"), "--check-positions",
                 "4"]) == 0
    assert main(["default", "--botzone", str(tmp_path / "npz")]) == 0
    assert "wrote" in capsys.readouterr().out
    # The shipped .npz was exported from the shipped .pt, so both bots hold the same model
    # (tests/floats.py): both name the checkpoint's digest, their model blocks agree line for line
    # but for the weights and their digests, and the weights agree to float32 rounding. Not bit for
    # bit: the .pt's batch norms are folded here, on this CPU's kernels.
    net = numpy_net.load_model(default_model_path())
    from_checkpoint, from_numpy = (ModelBlock.read(tmp_path / name / SOURCE_NAME)
                                   for name in ("pt", "npz"))
    digest = f"checkpoint_sha256={net.source['checkpoint_sha256']}"
    assert digest in from_checkpoint.source and digest in from_numpy.source
    assert from_checkpoint.definitions == from_numpy.definitions
    assert_same_weights(from_checkpoint.weights(net), from_numpy.weights(net),
                        "the bot exported from default.pt against default.npz's")


def test_the_bots_weights_are_compared_to_rounding_and_no_further(tmp_path):
    # What the comparison above accepts: the shipped model with every weight moved by up to 4 ulps
    # (another CPU's fold) writes the same bot; one weight of typical size changed by 1e-2 of itself
    # does not, and the failure names the array, the entry and the count.
    net = numpy_net.load_model(default_model_path())
    with np.load(default_model_path(), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files if name != "header"}
    rng = np.random.default_rng(1)
    nudged = {name: (array.view(np.int32) + rng.integers(-4, 5, array.shape).astype(np.int32))
              .view(np.float32) for name, array in arrays.items()}
    changed = dict(nudged)
    weight = changed["trunk.0.conv2.conv.weight"].copy()
    typical = int(np.argsort(np.abs(weight), axis=None)[weight.size // 2])
    weight.flat[typical] *= 1.01
    changed["trunk.0.conv2.conv.weight"] = weight
    blocks = {}
    for name, weights in (("shipped", arrays), ("nudged", nudged), ("changed", changed)):
        write_bot(numpy_net.NumpyNet(net.config, net.trunk_layers, weights, net.source),
                  tmp_path / name)
        blocks[name] = ModelBlock.read(tmp_path / name / SOURCE_NAME)
    shipped = blocks["shipped"].weights(net)
    assert blocks["nudged"].definitions == blocks["shipped"].definitions
    assert blocks["nudged"].payload != blocks["shipped"].payload  # bit for bit would fail here
    assert weights_mismatch(blocks["nudged"].weights(net), shipped) == ""
    message = weights_mismatch(blocks["changed"].weights(net), shipped)
    assert message.startswith("weights: 1 of ") and "trunk.0.conv2.weight: 1 of " in message
    assert len(message.splitlines()) == 2, message


class ModelBlock:
    """The model block of a written bot (`cpp_export`'s `_model_block`), taken apart: `source`, the
    comment line naming where the weights came from; `payload`, the weights' bytes decoded from
    their base64 literal; `definitions`, every other line, the digests of the weights checked
    against `payload` and left out (they digest bytes that rounding may change)."""

    def __init__(self, source: str, payload: bytes, definitions: list[str]) -> None:
        self.source, self.payload, self.definitions = source, payload, definitions

    @classmethod
    def read(cls, path: Path) -> ModelBlock:
        """The block of the bot source `path` (embedded weights)."""
        text = path.read_text()
        start = text.index("// The model (written by the exporter)")
        lines = text[start:text.index("// ====", start)].splitlines()
        source = next(line for line in lines if "source: " in line)
        opening = lines.index("static const char WEIGHTS_BASE64[] =")
        closing = next(index for index in range(opening, len(lines)) if lines[index].endswith(";"))
        literal = "".join(line.strip().rstrip(";").strip('"')
                          for line in lines[opening + 1:closing + 1])
        payload = base64.b64decode(literal)
        definitions = []
        for line in lines[:opening + 1] + lines[closing + 1:]:
            if line.startswith("//"):
                continue
            if "MODEL_SHA256" in line:
                assert f'"{hashlib.sha256(payload).hexdigest()}"' in line, line
                continue
            if "WEIGHTS_FNV1A" in line:
                assert f"0x{cpp_export.fnv1a64(payload):016x}ULL" in line, line
                continue
            definitions.append(line)
        return cls(source, payload, definitions)

    def weights(self, net: numpy_net.NumpyNet) -> dict[str, np.ndarray]:
        """The payload's floats cut into `net.layout_arrays()`'s arrays (names and shapes)."""
        floats = np.frombuffer(self.payload, "<f4")
        layout = net.layout_arrays()
        assert floats.size == sum(array.size for _, array in layout)
        bounds = np.cumsum([0] + [array.size for _, array in layout])
        return {name: floats[start:stop].reshape(array.shape)
                for (name, array), start, stop in zip(layout, bounds[:-1], bounds[1:],
                                                      strict=True)}
