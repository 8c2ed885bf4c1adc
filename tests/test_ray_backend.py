"""The Ray backend's config: the presets run on it as written, their async `pipeline.mode`
replaced by the sync one it runs (a log line says so, `config.json` records it), and an async
mode named by an override still refused.

None of these start Ray: the command-line check swaps `connect` and `RayRun.run` for no-ops,
so it resolves, builds and writes the run as `python -m amazons.train --backend ray` does and
plays nothing (tests/test_distributed.py runs the backend on real clusters).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("ray")  # the `ray` extra, which `make test` installs

from amazons.distributed import ray_backend  # noqa: E402
from amazons.distributed.ray_backend import RayRun  # noqa: E402
from amazons.train import Run, main  # noqa: E402
from amazons.train_config import apply_overrides, preset_config  # noqa: E402

REPLACED = "pipeline.mode: the preset's 'async' replaced by 'sync', the mode the RayRun backend runs"


@pytest.mark.parametrize("preset", ["cpu", "gpu"])
def test_a_preset_runs_on_ray_in_sync_mode_and_says_so(preset, capsys):
    config = preset_config(preset)
    assert config.pipeline.mode == "async"
    fitted = RayRun.fit_config(config, [])
    assert fitted == dataclasses.replace(config, pipeline=dataclasses.replace(config.pipeline, mode="sync"))
    assert capsys.readouterr().out.strip() == REPLACED
    assert Run.fit_config(config, []) is config  # the local backend runs the preset's own mode
    assert RayRun.fit_config(fitted, []) is fitted  # a resumed Ray run's config.json says sync already
    assert capsys.readouterr().out == ""


def test_an_async_mode_named_by_an_override_is_kept_and_refused(tmp_path, capsys):
    overrides = ["pipeline.mode=async"]
    config = apply_overrides(preset_config("cpu"), overrides)
    assert RayRun.fit_config(config, overrides) is config
    assert capsys.readouterr().out == ""
    with pytest.raises(ValueError, match="pipeline.mode='async': the RayRun backend runs sync"):
        RayRun(config, tmp_path / "run", resume=False)
    with pytest.raises(SystemExit) as stopped:
        main(["--backend", "ray", "--preset", "cpu", "--run-dir", str(tmp_path / "cli"), *overrides])
    assert stopped.value.code == 2
    assert "pipeline.mode='async': the RayRun backend runs sync" in capsys.readouterr().err
    assert not (tmp_path / "cli" / "config.json").exists()


def test_the_command_line_runs_the_cpu_preset_on_ray_as_written(tmp_path, capsys, monkeypatch):
    built: list[RayRun] = []
    monkeypatch.setattr(ray_backend, "connect", lambda address, config: False)
    monkeypatch.setattr(RayRun, "run", lambda run, progress=True: built.append(run))
    run_dir = tmp_path / "run"
    assert main(["--backend", "ray", "--preset", "cpu", "--run-dir", str(run_dir), "--iterations", "1",
                 "--no-progress"]) == 0
    assert REPLACED in capsys.readouterr().out.splitlines()
    (run,) = built
    assert run.config.pipeline.mode == "sync"
    stored = json.loads((run_dir / "config.json").read_text())
    assert stored["pipeline"]["mode"] == "sync" and stored["preset"] == "cpu"
