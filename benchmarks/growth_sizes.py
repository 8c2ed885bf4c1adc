"""What a net's size costs where it plays and where it learns: the shipped model grown.

    python benchmarks/growth_sizes.py 2x32 4x32 3x48 4x48 6x64

For each size `BxC` the shipped model (`amazons/models/default.pt`, 2 x 32) is grown
(`amazons.neural.growth`, silent) into `B` blocks of `C` channels, the other widths scaled with the
channels as the presets scale them (`size_config`), and measured:

* the C++ bot (`python -m amazons.export ... --botzone`, built with g++ -O2 as Botzone builds it):
  its source's bytes with the weights embedded, and with `--weights-file` the source's and the
  weights file's bytes; `cpp_forward_pos_per_s`, positions per CPU second of its network on 200
  positions of seeded random games; one whole keep-running JSON game at Botzone's clock (1 s a
  turn, 2 s the first) against the greedy player, as `--suite botzone` plays it: first-turn and
  median simulations, peak resident memory;
* the learner: samples per CPU second of the cpu preset's learner step with the net (batch 256,
  one thread, the median of 3 rounds of 8 steps, `benchmarks/profile_learner.py`'s timing).

One torch thread; run nothing beside it (the bot's turns are CPU-timed, the learner by thread CPU
time, but a busy machine still slows both). Prints a Markdown table and, with `--json`, the figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
for folder in (REPO, REPO / "benchmarks"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from profile_learner import preset_batches, step_times  # noqa: E402
from suite_botzone import play_cpp_game  # noqa: E402

from amazons.botzone.cpp_export import SOURCE_NAME, compile_command, write_bot  # noqa: E402
from amazons.export import random_positions  # noqa: E402
from amazons.models import default_checkpoint_path  # noqa: E402
from amazons.neural.checkpoint import load_model_for_play  # noqa: E402
from amazons.neural.growth import grow  # noqa: E402
from amazons.neural.learner import Learner  # noqa: E402
from amazons.neural.model import NetConfig, PolicyValueNet, count_parameters  # noqa: E402
from amazons.neural.served import numpy_net  # noqa: E402
from amazons.train.config import preset_config  # noqa: E402


def size_config(base: NetConfig, text: str) -> NetConfig:
    """`base` with `B` blocks of `C` channels ("BxC") and the widths the presets give `C`
    channels: attention keys C / 4, head C / 2, value MLP C, value channels 2 below 64 channels
    and 4 from 64 (tiny: 8, 16, 32, 2; small: 16, 32, 64, 4).

    Raises:
        ValueError: `text` is not "BxC" with B, C positive.
    """
    try:
        blocks, channels = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"a size is BLOCKSxCHANNELS, e.g. 4x48; got {text!r}") from None
    return base.replace(blocks=blocks, channels=channels, attention_dim=max(channels // 4, 1),
                        head_dim=max(channels // 2, 1), value_hidden=channels,
                        value_channels=2 if channels < 64 else 4)


def bot_figures(model: PolicyValueNet, folder: Path) -> dict[str, float]:
    """The C++ bot's source sizes, network speed and one game's figures for `model`."""
    net = numpy_net(model)
    embedded = folder / "embedded"
    write_bot(net, embedded)
    separate = folder / "separate"
    write_bot(net, separate, weights_file="amazons.bin")
    binary = embedded / "bot"
    subprocess.run(compile_command(embedded / SOURCE_NAME, binary), check=True,
                   capture_output=True, text=True)
    listing = folder / "positions.txt"
    np.savetxt(listing, random_positions(200, seed=7, max_plies=40), fmt="%d")
    speed = subprocess.run([str(binary), "--forward-speed", str(listing)], check=True,
                           capture_output=True, text=True).stdout
    figures = {
        "source_kb": (embedded / SOURCE_NAME).stat().st_size / 1000,
        "source_without_weights_kb": (separate / SOURCE_NAME).stat().st_size / 1000,
        "weights_file_kb": (separate / "amazons.bin").stat().st_size / 1000,
        "cpp_forward_pos_per_s": float(speed.split()[0]),
    }
    game = play_cpp_game(binary)
    figures.update({key.removeprefix("botzone."): value for key, value in game.items()
                    if key in ("botzone.cpp_simulations_first", "botzone.cpp_simulations_median",
                               "botzone.cpp_max_rss_mb", "botzone.cpp_tree_full_turns")})
    return figures


def learner_samples_per_s(model: PolicyValueNet) -> float:
    """Samples per CPU second of the cpu preset's learner step with `model` (a copy trains)."""
    config = preset_config("cpu")
    learner = Learner(copy.deepcopy(model), config.optim, seed=0)
    _, cpu, _ = step_times({"net": learner}, preset_batches(8), rounds=3)["net"]
    return config.train_batch_size * 1000 / statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    """Measure each size and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="+", metavar="BxC")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    small = load_model_for_play(default_checkpoint_path())
    results: dict[str, dict[str, float]] = {}
    for text in args.sizes:
        config = size_config(small.config, text)
        model = (small if config == small.config
                 else grow(small, config, method="silent", seed=0)).eval()
        with tempfile.TemporaryDirectory(prefix="amazons-growth-sizes-") as folder:
            figures = {"parameters": float(count_parameters(model))}
            figures.update(bot_figures(model, Path(folder)))
        figures["learner_samples_per_s"] = learner_samples_per_s(model)
        results[text] = figures
        print(text, json.dumps(figures), flush=True)
    print("\n| size | parameters | source, weights embedded | source + weights file "
          "| C++ network, pos/CPU s | first-turn simulations (2 s) | median simulations (1 s) "
          "| peak memory | learner samples/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for text, f in results.items():
        print(f"| {text} | {f['parameters']:,.0f} | {f['source_kb']:,.0f} kB "
              f"| {f['source_without_weights_kb']:,.0f} + {f['weights_file_kb']:,.0f} kB "
              f"| {f['cpp_forward_pos_per_s']:,.0f} | {f['cpp_simulations_first']:,.0f} "
              f"| {f['cpp_simulations_median']:,.0f} | {f['cpp_max_rss_mb']:.0f} MiB "
              f"| {f['learner_samples_per_s']:,.0f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
