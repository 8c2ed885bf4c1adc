"""The Botzone C++ export (`amazons.botzone.cpp_export`, `python -m amazons.export MODEL --botzone
DIR`): the parts it joins, the source it writes, the weights file and what it refuses.

Helpers and the compiled bot: `tests/cpp_bot.py`, `default_bot` in `tests/conftest.py`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cpp_bot import FAST, NEEDS_GXX, build, first_input
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
    # The shipped .npz was exported from the shipped .pt: the same weights, so the same model block
    # (only its comment line, which names the source, differs).
    from_checkpoint, from_numpy = (_model_block(tmp_path / name / SOURCE_NAME)
                                   for name in ("pt", "npz"))
    assert from_checkpoint == from_numpy


def _model_block(path: Path) -> list[str]:
    """The generated model block's definitions (comment lines left out)."""
    text = path.read_text()
    start = text.index("// The model (written by the exporter)")
    block = text[start:text.index("// ====", start)]
    return [line for line in block.splitlines() if not line.startswith("//")]
