"""Where the main job's core-seconds go: a sampling profile of every process of a real run.

`python benchmarks/profile_main_job.py [--backend torch|native|auto] [--after-iterations N]
[--warm-up S] [--seconds S] [--rate HZ] [--detail N] [--raw PATH] [KEY=VALUE ...]` starts
`python -m amazons.train --preset cpu` (the overrides appended) in a temporary run directory,
waits until `--after-iterations` iterations are written (default 3: the start-up, the first
games and the first evaluation's start, which imports torch in its servers and workers once a
run, are not profiled) plus `--warm-up` seconds, then
records every process of the run (the main process with the learner and the evaluation thread,
the inference server, the self-play actors, the evaluation's arena workers) with py-spy
(`record --subprocesses`, `--rate` samples a second, idle threads left out) for `--seconds`,
stops the run, and prints a table: per process role and per part of the work, the cores it used
(sampled CPU seconds per wall second) and its share of all sampled CPU time.

A sample is assigned by its Python stack: the role by the loop it runs under (the server's batch
loop, an actor's games, the arena, the learner's thread), the part by the deepest function of
the project's own code on the stack (`PARTS`). Numba's kernels show as the Python line that calls
them, so the search's kernels and the Python between two kernel calls are told apart by line
(the `--detail` listing). py-spy leaves out threads blocked in a system call, so a process
waiting on a pipe or a queue costs nothing here. Nothing in the run is changed by the profile
but its speed (py-spy reads the processes' memory from outside; about 1-2% at 47 Hz).

Needs py-spy (`pip install py-spy`); Linux, where py-spy may read other processes' memory.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]

# (role, part, test): the first test that a sample's project frames pass names its part. Each test
# gets the sample's project frames, leaf last, as "function (amazons/file.py:line)" strings.
ROLES = (
    ("inference server", ("_serve (amazons/serving/server.py", "_BatchLoop.")),
    ("self-play actors", ("actor_main (amazons/train/selfplay.py", "ChunkWriter.")),
)


def _has(frames: list[str], *needles: str) -> bool:
    return any(needle in frame for frame in frames for needle in needles)


def role_of(processes: list[str], frames: list[str]) -> str:
    """The process role of a sample: `processes` are py-spy's process entries of its stack (the
    main job first, then each child down to the sampled one), `frames` its project frames."""
    for role, needles in ROLES:
        if _has(frames, *needles):
            return role
    if len(processes) <= 1:  # the main process: the learner and its threads
        if _has(frames, "evaluation.py", "BackgroundEvaluation"):
            return "main: evaluation thread"
        return "main: learner and pipeline"
    if _has(frames, "arena.py") or "forkserver" in processes[-1] or "forkserver" in processes[1]:
        return "evaluation workers"  # the arena forks them from a forkserver
    return "other"


def part_of(role: str, frames: list[str]) -> str:
    """The part of the work a sample of `role` was doing."""
    leaf = frames[-1] if frames else ""
    # the main process runs in train's <module>
    imports = frames[1:] if role.startswith("main") else frames
    if _has(imports, "<module>", "warm_up") or _has(frames, "Run.__init__", "allocate_tree"):
        return "imports, start-up and allocation"
    if role == "inference server":
        if _has(frames, "load_flat_weights", "load_weights", "_refresh"):
            return "weight loads (fold + copy in place)"
        if _has(frames, "nativenet.py"):
            return "network, native (features, forward, priors)"
        if _has(frames, "engine.py"):
            return "features (engine)"
        if _has(frames, "gather_legal_priors", "policy_log_tables", "move_log_probs",
                "arrow_log_probs", "_gather"):
            return "legal-move priors (torch)"
        if _has(frames, ".forward (amazons/neural/model.py"):
            return "forward pass (torch)"
        if _has(frames, "NetworkEvaluator.evaluate"):
            return "evaluator glue (tensors, staging)"
        return "batching, shared memory, messages"
    if role == "self-play actors":
        if _has(frames, "_round_trip"):
            return "round trips to the server (messages)"
        if _has(frames, "InferenceClient.evaluate"):
            return "copies into and out of shared memory"
        if "mcts" in leaf:
            return "search (Numba kernels and the Python around them)"
        if "engine.py" in leaf:
            return "engine calls (moves, terminal tests)"
        if _has(frames, "replay.py", "records.py", "save_chunk"):
            return "game records and replay chunks"
        return "actor loop (Python)"
    if role.startswith("main"):
        if role == "main: evaluation thread":
            return "evaluation (matches, Elo)"
        if _has(frames, "ReplayBuffer.sample", "SampleBatch", "augment_batch"):
            return "replay sampling and augmentation"
        if _has(frames, "train_step"):
            return "learner step (forward, backward, AdamW)"
        if _has(frames, "checkpoint.py"):
            return "checkpoints"
        if _has(frames, "publish", "flatten_weights"):
            return "weights publishing"
        if _has(frames, "replay.py", "load_chunk", "add_to_window"):
            return "replay ingest (chunks into the window)"
        return "pipeline (Python)"
    if _has(frames, "_round_trip"):
        return "round trips to their server"
    if "arena.py" in leaf or "mcts" in leaf:
        return "arena games (search)"
    return "other"


def parse_raw(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw output: (frames root first, samples) per distinct stack."""
    stacks = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def summarize(stacks: list[tuple[list[str], int]], rate: int, seconds: float
              ) -> tuple[dict[tuple[str, str], float], dict[str, collections.Counter]]:
    """Core-seconds per second of wall clock by (role, part), and the leaf lines of each role."""
    cores: dict[tuple[str, str], float] = collections.defaultdict(float)
    leaves: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for frames, count in stacks:
        project = [frame for frame in frames if "amazons/" in frame]
        role = role_of([frame for frame in frames if frame.startswith("process ")], project)
        cores[(role, part_of(role, project))] += count / rate / seconds
        leaves[role][project[-1] if project else frames[-1]] += count
    return dict(cores), leaves


def print_table(cores: dict[tuple[str, str], float], leaves: dict[str, collections.Counter],
                detail: int, positions_per_s: float | None) -> None:
    total = sum(cores.values())
    print(f"\n{'role':<28} {'part':<52} {'cores':>6} {'share':>6}")
    by_role: dict[str, float] = collections.defaultdict(float)
    for (role, _), value in cores.items():
        by_role[role] += value
    for role in sorted(by_role, key=by_role.get, reverse=True):
        parts = sorted(((part, value) for (r, part), value in cores.items() if r == role),
                       key=lambda x: -x[1])
        for part, value in parts:
            print(f"{role:<28} {part:<52} {value:>6.3f} {value / total:>6.1%}")
        print(f"{role:<28} {'(all)':<52} {by_role[role]:>6.3f} {by_role[role] / total:>6.1%}")
    print(f"{'all processes':<28} {'':<52} {total:>6.3f} {1:>6.1%}")
    if positions_per_s is not None:
        print(f"self-play positions/s over the profiled iterations: {positions_per_s:.1f}")
    if detail:
        for role, counter in leaves.items():
            print(f"\n{role}: the {detail} most sampled lines of the project's code")
            for frame, count in counter.most_common(detail):
                print(f"  {count:>7}  {frame}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="auto", choices=("auto", "torch", "native"))
    parser.add_argument("--after-iterations", type=int, default=3,
                        help="iterations written before the profile")
    parser.add_argument("--warm-up", type=float, default=5.0, help="seconds after those iterations")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds profiled")
    parser.add_argument("--rate", type=int, default=47, help="samples per second per thread")
    parser.add_argument("--detail", type=int, default=0,
                        help="list each role's N most sampled lines")
    parser.add_argument("--raw", default=None, help="also keep py-spy's raw stacks here")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides of the main job")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("py-spy is not installed: pip install py-spy")
    with tempfile.TemporaryDirectory(prefix="amazons-profile-") as folder:
        run_dir = Path(folder) / "run"
        command = [sys.executable, "-m", "amazons.train", "--preset", "cpu",
                   "--run-dir", str(run_dir), "--iterations", "100000", "--no-progress",
                   f"inference.backend={args.backend}", *args.overrides]
        log = open(Path(folder) / "train.log", "w+")  # noqa: SIM115 (closed below)
        job = subprocess.Popen(command, cwd=REPOSITORY, stdout=log, stderr=subprocess.STDOUT)
        metrics = run_dir / "metrics.jsonl"
        try:
            deadline = time.monotonic() + 900
            while job.poll() is None and not (
                    metrics.exists()
                    and len(metrics.read_text().splitlines()) >= args.after_iterations):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the main job wrote fewer than {args.after_iterations} "
                                     "iterations in 15 minutes")
                time.sleep(0.5)
            if job.poll() is not None:
                log.seek(0)
                raise SystemExit(f"the main job ended early:\n{log.read()}")
            time.sleep(args.warm_up)
            lines_before = len(metrics.read_text().splitlines())
            raw = Path(args.raw) if args.raw else Path(folder) / "stacks.txt"
            subprocess.run([spy, "record", "--pid", str(job.pid), "--subprocesses", "--nonblocking",
                            "--rate", str(args.rate), "--duration", str(int(args.seconds)),
                            "--format", "raw", "--output", str(raw)],
                           check=True, capture_output=True)
            lines = metrics.read_text().splitlines()
        finally:
            job.send_signal(signal.SIGINT)
            try:
                job.wait(timeout=120)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
            log.close()
        import json

        profiled = [json.loads(line) for line in lines[lines_before:]]
        positions = None
        if profiled:
            seconds = sum(line["iteration_seconds"] for line in profiled)
            positions = sum(line["selfplay/positions"] for line in profiled) / max(seconds, 1e-9)
        cores, leaves = summarize(parse_raw(raw), args.rate, args.seconds)
        print(f"main job: {' '.join(command[1:])}; {os.cpu_count()} cores; "
              f"profiled {args.seconds:g} s at {args.rate:g} Hz after iteration "
              f"{args.after_iterations} + {args.warm_up:g} s")
        print_table(cores, leaves, args.detail, positions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
