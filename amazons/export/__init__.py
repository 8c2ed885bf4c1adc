"""Export a trained network: `python -m amazons.export CKPT OUT` and `... MODEL --botzone DIR`.

The Botzone bot and terminal play run the network with `amazons.neural.numpy_net` (numpy only), from
the `.npz` file this module writes (the format is `amazons.neural.numpy_net`'s). The export:

1. reads a learner or model checkpoint (`amazons.neural.checkpoint.load_model_for_play`: safe load,
   digest checked);
2. prepares the network for inference (`amazons.neural.model.prepare_for_inference`: eval mode,
   batch norms folded into the convolutions, float32);
3. writes its state dict, the config and the trunk's layer kinds with
   `amazons.neural.numpy_net.write_model` (atomically, with a SHA-256 digest of the arrays);
4. reads the file back with `amazons.neural.numpy_net.load_model` and checks that the numpy
   forward pass gives the torch model's legal-move priors and values (and the ownership map, when
   the network has the ownership head) on random positions (largest differences printed; above
   `TOLERANCE` the export fails and the file is removed).

`--pooled` carries a flat value head (8x8 only) over to the pooled one before writing the `.npz`
(`amazons.neural.growth.pool_value_head`: every other weight unchanged), so the shipped 8x8
network plays 6x6 to 10x10 with no training:
`python -m amazons.export amazons/models/default.pt default-pooled.npz --pooled`.

`--botzone DIR` writes the Botzone C++ bot instead of (or besides) the `.npz`: `DIR/bot.cpp`,
one C++ source with the network's weights (`amazons.botzone.cpp_export`; with `--weights-file NAME`
the weights go to `DIR/NAME` for Botzone's storage). Its MODEL is a checkpoint (checked against
torch like the `.npz` export), an exported `.npz`, or `default` (the shipped 8x8 model).

Imports torch (through `amazons.neural.model` and `amazons.neural.checkpoint`), numpy,
`amazons.neural.numpy_net` and `amazons.botzone.cpp_export`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from amazons import engine
from amazons.botzone import cpp_export
from amazons.models import default_model_path
from amazons.neural import numpy_net
from amazons.neural.checkpoint import CheckpointError, load_checkpoint, load_model_for_play
from amazons.neural.growth import pool_value_head
from amazons.neural.model import (
    PolicyValueNet,
    gather_legal_priors,
    policy_log_tables,
    segment_ids,
)
from amazons.neural.served import model_arrays

__all__ = [
    "TOLERANCE",
    "ExportError",
    "export_botzone",
    "export_checkpoint",
    "export_model",
    "main",
    "model_arrays",
    "random_positions",
    "torch_outputs",
    "torch_ownership",
    "verify_export",
]

TOLERANCE = 1e-4  # largest accepted difference between torch and numpy priors or values


class ExportError(ValueError):
    """The export's check failed: the numpy forward pass does not reproduce the torch model."""


def random_positions(count: int, seed: int = 0, max_plies: int = 40) -> np.ndarray:
    """`(count, 3) uint64` canonical positions after 0..max_plies random legal plies,
    none terminal."""
    rng = np.random.default_rng(seed)
    positions = np.repeat(engine.start_position()[None], count, axis=0)
    plies = rng.integers(0, max_plies + 1, size=count)
    for ply in range(max_plies):
        live = np.flatnonzero(plies > ply)
        if live.size == 0:
            break
        moves, offsets = engine.legal_moves(np.ascontiguousarray(positions[live]))
        counts = np.diff(offsets)
        picks = offsets[:-1] + rng.integers(0, np.maximum(counts, 1))
        movable = counts > 0
        children = engine.apply_moves(np.ascontiguousarray(positions[live[movable]]),
                                      np.ascontiguousarray(moves[picks[movable]]))
        keep = ~engine.is_terminal(children)
        positions[live[movable][keep]] = children[keep]
    return positions


@torch.no_grad()
def torch_outputs(model: PolicyValueNet, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The torch model's legal-move priors `(M,) float32` and values `(B,) float32` (eval mode,
    float32, unfolded batch norms, on the model's device), the moves being
    `engine.legal_moves(positions)`'s."""
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    try:
        features = torch.from_numpy(engine.features(positions, model.config.num_planes)).to(device)
        output = model(features)
        moves, offsets = engine.legal_moves(positions)
        priors = gather_legal_priors(policy_log_tables(output.policy),
                                     torch.from_numpy(moves).to(device),
                                     torch.from_numpy(segment_ids(offsets)).to(device))
    finally:
        model.train(was_training)
    return priors.cpu().numpy(), output.value.float().cpu().numpy()


@torch.no_grad()
def torch_ownership(model: PolicyValueNet, positions: np.ndarray) -> np.ndarray:
    """The torch model's ownership map `(B, 64) float32` (eval mode, float32, on the model's
    device); the model must have the ownership head."""
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    try:
        features = torch.from_numpy(engine.features(positions, model.config.num_planes)).to(device)
        return model(features).ownership.float().cpu().numpy()
    finally:
        model.train(was_training)


def verify_export(model: PolicyValueNet, net: numpy_net.NumpyNet,
                  positions: np.ndarray) -> dict[str, float]:
    """Largest absolute differences between the torch model and the numpy network.

    Returns:
        `{"priors": ..., "values": ...}` over every legal move and every position of `positions`
        `(B, 3) uint64` (non-terminal), and `"ownership"` over every square when the model has
        the ownership head.
    """
    expected_priors, expected_values = torch_outputs(model, positions)
    moves, offsets = engine.legal_moves(positions)
    evaluator = numpy_net.NumpyEvaluator(net)
    priors, values = evaluator.evaluate(positions, moves, offsets)
    differences = {"priors": float(np.abs(priors - expected_priors).max(initial=0.0)),
                   "values": float(np.abs(values - expected_values).max(initial=0.0))}
    if model.config.ownership_head:
        expected = torch_ownership(model, positions)
        differences["ownership"] = float(np.abs(evaluator.ownership(positions) - expected)
                                         .max(initial=0.0))
    return differences


def export_model(model: PolicyValueNet, path: str | os.PathLike,
                 source: dict[str, Any] | None = None, check_positions: int = 32,
                 seed: int = 0) -> tuple[Path, dict[str, float]]:
    """Write `model` as an exported file and check it; returns the path and the differences.

    Args:
        model: the network (any mode; it is not changed).
        path: the `.npz` file to write (atomically).
        source: plain values recorded in the header (where the weights came from).
        check_positions: random positions the check compares on (0: no check).
        seed: seeds those positions.

    Raises:
        ExportError: a difference above `TOLERANCE` (the written file is removed).
        amazons.neural.numpy_net.ModelFileError: the file cannot be written.
    """
    config, trunk, arrays = model_arrays(model)
    path = numpy_net.write_model(path, config, trunk, arrays, source)
    differences = {"priors": 0.0, "values": 0.0}
    if check_positions > 0:
        differences = verify_export(model, numpy_net.load_model(path),
                                    random_positions(check_positions, seed))
        worst = max(differences.values())
        if not worst <= TOLERANCE:
            path.unlink(missing_ok=True)
            raise ExportError(
                f"{path}: the numpy network differs from the torch model by {worst:.2e} "
                f"({_describe_differences(differences, '.2e')}; tolerance {TOLERANCE:.0e}); "
                f"the file was removed")
    return path, differences


def _describe_differences(differences: dict[str, float], spec: str) -> str:
    """`"priors 1.2e-07, values 3.0e-08[, ownership ...]"`."""
    return ", ".join(f"{name} {value:{spec}}" for name, value in differences.items())


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike,
                      check_positions: int = 32,
                      pooled: bool = False) -> tuple[Path, dict[str, float]]:
    """Export the network of a learner or model checkpoint (see `export_model`).

    With `pooled`, a flat value head (8x8 only) is first carried over to the pooled one
    (`amazons.neural.growth.pool_value_head`: every other weight unchanged), so the written
    model plays every board size with no training; a pooled network is written as it is.

    Raises:
        amazons.neural.checkpoint.CheckpointError: the checkpoint cannot be read.
        ExportError, amazons.neural.numpy_net.ModelFileError: see `export_model`.
    """
    checkpoint = Path(checkpoint)
    payload = load_checkpoint(checkpoint)
    model = load_model_for_play(checkpoint, "cpu")
    source = {"checkpoint": checkpoint.name, "checkpoint_sha256": _file_digest(checkpoint),
              "kind": payload["kind"], "step": int(payload["step"]),
              "torch_version": str(payload.get("torch_version", ""))}
    if pooled and model.config.value_head == "flat":
        model = pool_value_head(model).eval()
        source["value_head"] = "pooled from flat (amazons.neural.growth.pool_value_head)"
    return export_model(model, out, source, check_positions)


def _checkpoint_network(checkpoint: Path, check_positions: int) -> numpy_net.NumpyNet:
    """The numpy network of a checkpoint, checked against torch like `export_model` checks.

    Raises:
        amazons.neural.checkpoint.CheckpointError: the checkpoint cannot be read.
        ExportError: a difference above `TOLERANCE`.
    """
    payload = load_checkpoint(checkpoint)
    model = load_model_for_play(checkpoint, "cpu")
    config, trunk, arrays = model_arrays(model)
    source = {"checkpoint": checkpoint.name, "checkpoint_sha256": _file_digest(checkpoint),
              "step": int(payload["step"])}
    net = numpy_net.NumpyNet(config, trunk, arrays, source)
    if check_positions > 0:
        differences = verify_export(model, net, random_positions(check_positions))
        if not max(differences.values()) <= TOLERANCE:
            raise ExportError(f"{checkpoint}: the numpy network differs from the torch model "
                              f"({_describe_differences(differences, '.2e')}; "
                              f"tolerance {TOLERANCE:.0e})")
    return net


def export_botzone(model: str | os.PathLike, directory: str | os.PathLike,
                   weights_file: str | None = None, check_positions: int = 32) -> list[Path]:
    """Write the Botzone C++ bot of a model: `DIR/bot.cpp` (and `DIR/<weights_file>`).

    Args:
        model: a `.pt` checkpoint, an exported `.npz` model, or `"default"` (the shipped 8x8 model).
        directory: where to write.
        weights_file: None embeds the weights in the source; a file name writes them beside it.
        check_positions: for a checkpoint, random positions on which numpy is compared with torch.

    Returns:
        The paths written (see `amazons.botzone.cpp_export.write_bot`).

    Raises:
        FileNotFoundError: no such model file.
        amazons.neural.checkpoint.CheckpointError, amazons.neural.numpy_net.ModelFileError,
            ExportError: the model cannot be read or does not check out.
        amazons.botzone.cpp_export.BotzoneExportError: a bad weights-file name.
    """
    path = default_model_path() if str(model) == "default" else Path(model)
    if path.suffix == ".pt":
        net = _checkpoint_network(path, check_positions)
    else:
        net = numpy_net.load_model(path)
    return cpp_export.write_bot(net, directory, weights_file)


def main(argv: Sequence[str] | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None) -> int:
    """`python -m amazons.export MODEL [OUT] [--botzone DIR [--weights-file NAME]]
    [--check-positions N]`; 0 on success, 2 on an error."""
    stdout = sys.stdout if stdout is None else stdout
    stderr = sys.stderr if stderr is None else stderr
    parser = argparse.ArgumentParser(
        prog="python -m amazons.export",
        description="Export a checkpoint's network to a torch-free .npz model file "
                    "(amazons.neural.numpy_net), and/or a model to the Botzone C++ bot "
                    "(--botzone).")
    parser.add_argument("model", help="a learner or model checkpoint (.pt); with --botzone also an "
                                      "exported .npz model or 'default' (the shipped 8x8 model)")
    parser.add_argument("out", nargs="?", default=None,
                        help="the .npz model file to write from a checkpoint, e.g. model.npz")
    parser.add_argument("--botzone", metavar="DIR", default=None,
                        help="write the Botzone C++ bot, DIR/bot.cpp (docs/botzone.md)")
    parser.add_argument("--weights-file", metavar="NAME", default=None,
                        help="with --botzone: write the weights to DIR/NAME for Botzone's storage "
                             "(the bot reads data/NAME) instead of embedding them in the source")
    parser.add_argument("--pooled", action="store_true",
                        help="carry a flat value head (8x8 only) over to the pooled one before "
                             "writing OUT, so the model plays every board size (6x6 to 10x10)")
    parser.add_argument("--check-positions", type=int, default=32,
                        help="random positions on which to compare numpy with torch (0: skip)")
    args = parser.parse_args(argv)
    checkpoint = Path(args.model).suffix == ".pt"
    if args.out is None and args.botzone is None:
        parser.error("give OUT (the .npz to write) or --botzone DIR (or both)")
    if args.out is not None and not checkpoint:
        parser.error(f"OUT is for a .pt checkpoint; {args.model!r} is already a numpy model "
                     "(use --botzone DIR)")
    if args.weights_file is not None and args.botzone is None:
        parser.error("--weights-file goes with --botzone DIR")
    if args.pooled and (args.out is None or not checkpoint):
        parser.error("--pooled goes with a .pt checkpoint and OUT (the .npz to write)")
    torch.set_num_threads(1)
    try:
        if args.out is not None:
            path, differences = export_checkpoint(args.model, args.out, args.check_positions,
                                                  args.pooled)
            net = numpy_net.load_model(path)
            heads = (f"{net.policy_head} head"
                     + (", arrow source term" if net.has_arrow_source else "")
                     + (", ownership head" if net.has_ownership else ""))
            print(f"wrote {path} ({path.stat().st_size:,} bytes, {net.num_parameters():,} weights, "
                  f"{heads}); largest difference from torch over {args.check_positions} "
                  f"positions: {_describe_differences(differences, '.1e')}",
                  file=stdout)
        if args.botzone is not None:
            model = args.out if args.out is not None else args.model
            for path in export_botzone(model, args.botzone, args.weights_file,
                                       args.check_positions):
                print(f"wrote {path} ({path.stat().st_size:,} bytes)", file=stdout)
            directory = Path(args.botzone)
            size = (directory / cpp_export.SOURCE_NAME).stat().st_size
            if args.weights_file is None and size > cpp_export.LARGE_SOURCE_BYTES:
                print(f"note: the source is {size:,} bytes with its weights embedded (over "
                      f"{cpp_export.LARGE_SOURCE_BYTES:,}); --weights-file NAME keeps them in a "
                      "file for Botzone's storage instead (docs/botzone.md)", file=stdout)
            command = cpp_export.compile_command(directory / cpp_export.SOURCE_NAME,
                                                 directory / "bot")
            print(f"build: {' '.join(command)}", file=stdout)
    except (FileNotFoundError, CheckpointError, numpy_net.ModelFileError, ExportError,
            cpp_export.BotzoneExportError, OSError) as error:
        print(f"{parser.prog}: {error}", file=stderr)
        return 2
    return 0

