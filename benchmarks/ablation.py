"""Ablations of the main job at equal wall-clock: train each arm for the same minutes, then play
each arm's last model against the base arm's in seeded, colour-alternating arena matches.

    python benchmarks/ablation.py --runs-dir /work/runs/ablation --minutes 30 --games 80 \\
        --arm base --arm "gumbel=selfplay.search.root=gumbel selfplay.search.c_scale=0.1" \\
        --arm "cap=selfplay.full_search_prob=0.25 selfplay.fast_simulations=16"

An arm is `NAME` (the preset as it is) or `NAME=OVERRIDES` (the main command's `KEY=VALUE`
overrides, separated by spaces); the first arm is the base. Each arm is the README's main command,
`python -m amazons.train --preset PRESET --iterations 100000 --no-progress OVERRIDES`, in
`RUNS_DIR/NAME`, stopped with SIGTERM when its wall-clock share is spent. The arms train one after
another, so nothing else shares the cores with any of them; run nothing beside this command.

The command can be stopped and started again at any point (a session's end, Ctrl-C): what each
arm has trained is kept in `RUNS_DIR/ablation.json`, an arm stopped early continues with
`--resume` for the seconds it still owes, and finished matches are not played again. Each match is
`python -m amazons.arena mcts-net:ARM mcts-net:BASE --games GAMES --simulations SIMS --seed SEED`
(or `--time-budget`), both sides with the players' default search, so it compares the networks; its
JSON and records are kept in `RUNS_DIR/matches/`. At the end the command prints a Markdown table:
each arm's overrides, iterations, self-play positions and learner steps within its minutes, and
its score against the base with the Elo difference and its 95% interval.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE_FILE = "ablation.json"


@dataclass(frozen=True)
class Arm:
    """One arm: its name (its run directory's) and its overrides of the preset."""

    name: str
    overrides: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Arm:
        """`NAME` or `NAME=KEY=VALUE KEY=VALUE ...`.

        Raises:
            ValueError: an empty or path-like name, or an override without `=`.
        """
        name, _, rest = text.partition("=")
        name = name.strip()
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad arm {text!r}: "
                             "expected NAME or NAME=KEY=VALUE ..., NAME a plain word")
        overrides = tuple(shlex.split(rest))
        bad = [item for item in overrides if "=" not in item]
        if bad:
            raise ValueError(f"arm {name!r}: override {bad[0]!r} is not KEY=VALUE")
        return cls(name, overrides)


def _load_state(path: Path) -> dict:
    if not path.exists():
        return {"arms": {}}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SystemExit(f"{path} is not valid JSON ({error}): "
                         "remove it to start the ablation afresh") from None


def _save_state(path: Path, state: dict) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(temporary, path)


def train_arm(arm: Arm, runs_dir: Path, preset: str, seconds: float, state: dict,
              state_path: Path) -> None:
    """Train `arm` until it has used `seconds` of wall clock in all (over any number of calls)."""
    record = state["arms"].setdefault(arm.name, {"overrides": list(arm.overrides),
                                                 "trained_s": 0.0})
    if record["overrides"] != list(arm.overrides):
        raise SystemExit(f"arm {arm.name!r} was trained with {record['overrides']}, "
                         f"not {list(arm.overrides)}: name the new arm differently")
    remaining = seconds - record["trained_s"]
    if remaining <= 1.0:
        return
    run_dir = runs_dir / arm.name
    resume = (run_dir / "checkpoints" / "latest.pt").exists()
    command = [sys.executable, "-m", "amazons.train", "--run-dir", str(run_dir), "--iterations",
               "100000", "--no-progress"]
    command += ["--resume"] if resume else ["--preset", preset, *arm.overrides]
    print(f"arm {arm.name}: training {remaining / 60:.1f} min{' (resumed)' if resume else ''}: "
          f"{shlex.join(command)}", flush=True)
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, start_new_session=True)
    try:
        process.wait(timeout=remaining)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()
    except BaseException:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()
        record["trained_s"] += time.monotonic() - started
        _save_state(state_path, state)
        raise
    record["trained_s"] += time.monotonic() - started
    _save_state(state_path, state)
    if process.returncode not in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
        raise SystemExit(f"arm {arm.name}: the main command exited "
                         f"with status {process.returncode}")


def last_model(run_dir: Path) -> Path:
    """The newest `models/model-NNNN.pt` of a run."""
    models = sorted((run_dir / "models").glob("model-*.pt"))
    if not models:
        raise SystemExit(f"{run_dir} holds no model: train it first")
    return models[-1]


def run_summary(run_dir: Path) -> dict[str, float]:
    """Iterations, self-play positions and learner steps from a run's `metrics.jsonl`."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
             if line.strip()]
    return {
        "iterations": max((line.get("iteration", 0) for line in lines), default=0),
        "positions": sum(line.get("selfplay/positions", 0) for line in lines),
        "learner_steps": max((line.get("train/learner_step", 0) for line in lines), default=0),
    }


def play_match(arm: Arm, base: Arm, runs_dir: Path, args: argparse.Namespace) -> dict:
    """The arena match of `arm`'s last model against `base`'s (played once, then read back)."""
    out = runs_dir / "matches" / f"{arm.name}-vs-{base.name}.json"
    if out.exists():
        return json.loads(out.read_text())
    budget = (["--time-budget", str(args.time_budget)] if args.time_budget
              else ["--simulations", str(args.simulations)])
    command = [sys.executable, "-m", "amazons.arena", f"mcts-net:{last_model(runs_dir / arm.name)}",
               f"mcts-net:{last_model(runs_dir / base.name)}", "--games", str(args.games), *budget,
               "--seed", str(args.seed), "--processes", str(args.processes), "--json", str(out),
               "--record", str(out.with_suffix(".records"))]
    print(f"match {arm.name} vs {base.name}: {shlex.join(command)}", flush=True)
    subprocess.run(command, cwd=REPO, check=True)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-dir", type=Path, required=True,
                        help="where the arms' run directories go (outside the repository)")
    parser.add_argument("--arm", action="append", required=True, metavar="NAME[=OVERRIDES]",
                        help="an arm (repeatable); the first is the base")
    parser.add_argument("--minutes", type=float, required=True,
                        help="wall-clock minutes of training per arm")
    parser.add_argument("--preset", default="cpu", choices=("cpu", "gpu"))
    parser.add_argument("--games", type=int, default=80,
                        help="games of each arm against the base (default 80)")
    parser.add_argument("--simulations", type=int, default=48,
                        help="simulations per move in the matches")
    parser.add_argument("--time-budget", type=float, default=None,
                        help="seconds per move instead of --simulations")
    parser.add_argument("--seed", type=int, default=12, help="seed of the matches' openings")
    parser.add_argument("--processes", type=int, default=2, help="arena worker processes")
    parser.add_argument("--train-only", action="store_true", help="train the arms, play no match")
    args = parser.parse_args(argv)
    try:
        arms = [Arm.parse(text) for text in args.arm]
    except ValueError as error:
        parser.error(str(error))
    if len({arm.name for arm in arms}) != len(arms):
        parser.error("arm names must differ")
    if args.runs_dir.resolve().is_relative_to(REPO):
        parser.error("keep --runs-dir outside the repository")
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    state_path = args.runs_dir / STATE_FILE
    state = _load_state(state_path)
    for arm in arms:
        train_arm(arm, args.runs_dir, args.preset, args.minutes * 60, state, state_path)
    if args.train_only:
        return 0
    base = arms[0]
    print(f"\n| arm | overrides | iterations, positions, learner steps in {args.minutes:g} min | "
          f"score against {base.name} | Elo (95% interval) |\n|---|---|---|---|---|")
    for arm in arms:
        summary = run_summary(args.runs_dir / arm.name)
        trained = (f"{summary['iterations']:.0f}, {summary['positions']:,.0f}, "
                   f"{summary['learner_steps']:,.0f}")
        overrides = " ".join(f"`{item}`" for item in arm.overrides) or "(preset)"
        if arm is base:
            print(f"| {arm.name} | {overrides} | {trained} | | |")
            continue
        result = play_match(arm, base, args.runs_dir, args)
        print(f"| {arm.name} | {overrides} | {trained} | {result['wins_a']}/{result['games']} | "
              f"{result['elo']:+.0f} ({result['elo_low']:+.0f} .. {result['elo_high']:+.0f}) |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
