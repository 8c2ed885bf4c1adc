"""The Ray backend's config: the presets run on it as written, their async `pipeline.mode`
replaced by the sync one it runs (a log line says so, `config.json` records it), and an async
mode named by an override still refused.

The command-line check runs `python -m amazons.train --backend ray --preset cpu` for real: it
starts a Ray runtime on this machine and plays and trains one small iteration (slow: Ray's start
alone takes seconds on two cores). tests/test_distributed.py runs the backend on simulated
clusters of several nodes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import tempfile

import pytest

ray = pytest.importorskip("ray")  # the `ray` extra, which `make test` installs

from test_distributed import TINY  # noqa: E402

from amazons.config import config_to_dict  # noqa: E402
from amazons.distributed.ray_backend import RayRun  # noqa: E402
from amazons.records import read_records  # noqa: E402
from amazons.train.config import apply_overrides, preset_config  # noqa: E402
from amazons.train.run import Run, main  # noqa: E402

REPLACED = ("pipeline.mode: the preset's 'async' replaced by 'sync',"
            " the mode the RayRun backend runs")


@pytest.mark.parametrize("preset", ["cpu", "gpu"])
def test_a_preset_runs_on_ray_in_sync_mode_and_says_so(preset, capsys):
    config = preset_config(preset)
    assert config.pipeline.mode == "async"
    fitted = RayRun.fit_config(config, [])
    assert fitted == dataclasses.replace(config,
                                         pipeline=dataclasses.replace(config.pipeline, mode="sync"))
    assert capsys.readouterr().out.strip() == REPLACED
    assert Run.fit_config(config, []) is config  # the local backend runs the preset's own mode
    # a resumed Ray run's config.json says sync already
    assert RayRun.fit_config(fitted, []) is fitted
    assert capsys.readouterr().out == ""


def test_an_async_mode_named_by_an_override_is_kept_and_refused(tmp_path, capsys):
    overrides = ["pipeline.mode=async"]
    config = apply_overrides(preset_config("cpu"), overrides)
    assert RayRun.fit_config(config, overrides) is config
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="pipeline.mode='async': the RayRun backend runs sync"):
        RayRun(config, tmp_path / "run", resume=False)
    with pytest.raises(SystemExit) as stopped:
        main(["--backend", "ray", "--preset", "cpu", "--run-dir", str(tmp_path / "cli"),
              *overrides])
    assert stopped.value.code == 2
    assert "pipeline.mode='async': the RayRun backend runs sync" in capsys.readouterr().err
    assert not (tmp_path / "cli" / "config.json").exists()


# A small run: test_distributed's tiny run without its pipeline mode (the command line's preset
# chooses it: the test checks that its async becomes sync), 2 games an iteration, a small Ray.
SMALL = [override for override in TINY if not override.startswith("pipeline.mode=")] + [
    "games_per_iteration=2",
    "ray.num_cpus=2",
    "ray.object_store_mb=100",
]


# Serial: Ray's object store and the node's segments live in /dev/shm, which other tests count.
@pytest.mark.slow
@pytest.mark.serial
def test_the_command_line_runs_the_cpu_preset_on_a_ray_runtime_it_starts(tmp_path, capsys,
                                                                         monkeypatch):
    """`python -m amazons.train --backend ray --preset cpu` without `--address`: the run starts
    a Ray runtime on this machine, plays and trains an iteration of the preset as written (its
    async mode replaced by sync, and the overrides that make it small), and shuts Ray down."""
    ray_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    monkeypatch.setenv("RAY_TMPDIR", ray_dir)
    monkeypatch.setenv("RAY_memory_monitor_refresh_ms", "0")  # it kills workers on a full machine
    run_dir = tmp_path / "run"
    try:
        assert main(["--backend", "ray", "--preset", "cpu", "--run-dir", str(run_dir),
                     "--iterations", "1", "--no-progress", *SMALL]) == 0
        assert not ray.is_initialized()  # the run started Ray, so it shut it down
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)
    out = capsys.readouterr().out
    assert REPLACED in out.splitlines()
    assert "backend ray (sync pipeline), preset cpu" in out
    written = apply_overrides(preset_config("cpu"), SMALL)
    expected = dataclasses.replace(written, iterations=1,  # --iterations
                                   pipeline=dataclasses.replace(written.pipeline, mode="sync"))
    stored = json.loads((run_dir / "config.json").read_text())
    assert stored == json.loads(json.dumps(config_to_dict(expected)))
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in metrics] == [1]
    assert math.isfinite(metrics[0]["train/loss"]) and metrics[0]["ray/nodes_active"] >= 1
    assert len(read_records(run_dir / "games" / "selfplay.txt")) == 2  # replayed move by move
    models = sorted(path.name for path in (run_dir / "models").iterdir())
    assert models == ["model-0000.pt", "model-0001.pt"]
