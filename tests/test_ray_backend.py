"""The Ray backend's config: the presets run on it as written, their async `pipeline.mode`
replaced by the sync one it runs (a log line says so, `config.json` records it), and an async
mode named by an override still refused.

No Ray runtime starts here: tests/test_distributed.py runs the backend for real, on simulated
clusters of several nodes and from the command line (every test that starts a runtime is in that
file, so that one runs at a time).
"""

from __future__ import annotations

import dataclasses

import pytest

ray = pytest.importorskip("ray")  # the `ray` extra, which `make test` installs

from test_distributed import REPLACED  # noqa: E402

from amazons.distributed.ray_backend import RayRun  # noqa: E402
from amazons.train.command import main  # noqa: E402
from amazons.train.config import apply_overrides, preset_config  # noqa: E402
from amazons.train.run import Run  # noqa: E402


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
