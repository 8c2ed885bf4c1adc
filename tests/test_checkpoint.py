"""Checkpoints (`amazons.neural.checkpoint`): exact restarts, safe loading, clear errors."""

from __future__ import annotations

import hashlib
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from floats import assert_close
from test_growth import rounding_bound
from test_learn import random_batch

from amazons import engine
from amazons.export import torch_outputs
from amazons.models import default_checkpoint_path
from amazons.neural import checkpoint as checkpoint_module
from amazons.neural.checkpoint import (
    CheckpointError,
    learner_from_checkpoint,
    load_checkpoint,
    load_model_for_play,
    restore_learner,
    save_checkpoint,
    save_model,
)
from amazons.neural.learner import Learner, OptimConfig
from amazons.neural.model import PolicyValueNet, net_config

torch.set_num_threads(1)

CONFIG = OptimConfig(lr=1e-3, warmup_steps=2, total_steps=20, grad_clip_norm=0.5)


def make_learner(preset: str = "tiny", seed: int = 0, **overrides) -> Learner:
    torch.manual_seed(seed)
    return Learner(PolicyValueNet(net_config(preset, **overrides)), CONFIG, seed=seed)


@pytest.fixture(scope="module")
def batches():
    rng = np.random.default_rng(21)
    return [random_batch(rng, 16) for _ in range(3)]


@pytest.fixture
def trained(batches, tmp_path):
    """A learner after two steps, and its checkpoint."""
    learner = make_learner()
    for batch in batches[:2]:
        learner.train_step(batch)
    path = save_checkpoint(tmp_path / "run" / "step2.pt", learner, extra={"games": 12})
    return learner, path


def test_save_load_gives_identical_outputs_and_an_identical_next_step(trained, batches):
    learner, path = trained
    assert [p.name for p in path.parent.iterdir()] == ["step2.pt"]  # no temporary file left
    positions = batches[2].positions
    features = torch.from_numpy(engine.features(positions, 7))
    played = load_model_for_play(path)
    assert not played.training
    for name, tensor in learner.model.state_dict().items():
        assert torch.equal(played.state_dict()[name], tensor), name
    # Same weights and the same memory format (the learner trains channels_last): same numbers.
    played = played.to(memory_format=torch.channels_last)
    features = features.contiguous(memory_format=torch.channels_last)
    learner.model.eval()
    with torch.no_grad():
        expected, got = learner.model(features), played(features)
    for want, have in zip(list(expected.policy) + [expected.value], list(got.policy) + [got.value],
                          strict=True):
        assert torch.equal(want, have)

    resumed = learner_from_checkpoint(path)
    assert resumed.step == 2 and resumed.config == learner.config
    rebuilt = make_learner(seed=99)  # other initial weights, restored from the file
    assert restore_learner(path, rebuilt) == {"games": 12}
    for other in (resumed, rebuilt):
        assert other.rng.bit_generator.state == learner.rng.bit_generator.state
    first = learner.train_step(batches[2])
    for other in (resumed, rebuilt):
        again = other.train_step(batches[2])
        assert again == first
        for mine, theirs in zip(learner.model.state_dict().values(),
                                other.model.state_dict().values(), strict=True):
            assert torch.equal(mine, theirs)
        assert other.optimizer.param_groups[0]["lr"] == learner.optimizer.param_groups[0]["lr"]


def test_rng_states_are_restored(batches, tmp_path):
    learner = make_learner()
    learner.train_step(batches[0])
    path = save_checkpoint(tmp_path / "rng.pt", learner)
    expected = (random.random(), np.random.random(), float(torch.rand(1)),  # noqa: NPY002
                int(learner.rng.integers(1 << 40)))
    for _ in range(3):  # move every generator on
        random.random(), np.random.random(), torch.rand(5), learner.rng.random()  # noqa: NPY002
    restore_learner(path, learner)
    assert (random.random(), np.random.random(), float(torch.rand(1)),  # noqa: NPY002
            int(learner.rng.integers(1 << 40))) == expected


def test_model_only_checkpoint_plays_but_cannot_resume(tmp_path):
    model = PolicyValueNet(net_config("tiny", policy_head="factorized", num_planes=3))
    path = save_model(tmp_path / "model.pt", model)
    played = load_model_for_play(path)
    assert played.config == model.config
    for name, tensor in model.state_dict().items():
        assert torch.equal(played.state_dict()[name], tensor)
    with pytest.raises(CheckpointError, match="model checkpoint cannot restore a learner"):
        learner_from_checkpoint(path)


def test_truncated_checkpoint_is_rejected(trained, tmp_path):
    _, path = trained
    data = path.read_bytes()
    for size in (0, 100, len(data) // 2, len(data) - 10):
        cut = tmp_path / f"cut{size}.pt"
        cut.write_bytes(data[:size])
        with pytest.raises(CheckpointError, match=rf"{cut.name}.*(truncated or corrupt|SHA-256)"):
            load_model_for_play(cut)


def test_tampered_weights_are_rejected(trained, tmp_path):
    learner, path = trained
    data = bytearray(path.read_bytes())
    weight = learner.model.state_dict()["value_head.hidden.weight"].numpy().tobytes()
    where = bytes(data).find(weight[:32])
    assert where > 0
    data[where + 5] ^= 0x40  # one bit of one weight: torch.load alone would accept it
    tampered = tmp_path / "tampered.pt"
    tampered.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"tampered\.pt.*SHA-256"):
        load_model_for_play(tampered)


class _Marker:
    """Unpickling this would create a file: the safe loader must refuse it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_checkpoint_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "code-ran"
    evil = tmp_path / "evil.pt"
    torch.save({"format": "amazons-checkpoint", "version": 1, "payload": _Marker(marker)}, evil)
    with pytest.raises(CheckpointError, match=r"evil\.pt: refused"):
        load_checkpoint(evil)
    assert not marker.exists()
    with evil.open("wb") as stream:  # a plain pickle, not even a torch file
        pickle.dump(_Marker(marker), stream)
    with pytest.raises(CheckpointError, match=r"evil\.pt"):
        load_checkpoint(evil)
    assert not marker.exists()


def test_foreign_and_missing_files_are_rejected(tmp_path):
    with pytest.raises(CheckpointError, match=r"nothing\.pt: no such checkpoint"):
        load_checkpoint(tmp_path / "nothing.pt")
    foreign = tmp_path / "foreign.pt"
    torch.save({"model": {"w": torch.zeros(2)}}, foreign)
    with pytest.raises(CheckpointError, match=r"foreign\.pt: not an amazons checkpoint"):
        load_model_for_play(foreign)
    torch.save({"format": "amazons-checkpoint", "version": 99, "payload": {}}, foreign)
    with pytest.raises(CheckpointError, match="version 99"):
        load_checkpoint(foreign)


def test_mismatched_learner_is_rejected_with_the_differences(trained):
    _, path = trained
    with pytest.raises(CheckpointError, match=r"step2\.pt: net config mismatch: "
                                              r".*channels: checkpoint 32, learner 64"):
        restore_learner(path, make_learner("small"))
    other = Learner(PolicyValueNet(net_config("tiny")), CONFIG.replace(lr=5e-4))
    with pytest.raises(CheckpointError,
                       match=r"optim config mismatch: lr: checkpoint 0.001, learner 0.0005"):
        restore_learner(path, other)


def test_a_failed_save_keeps_the_previous_checkpoint(trained, monkeypatch):
    learner, path = trained
    before = path.read_bytes()

    def broken_save(obj, stream):
        stream.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(CheckpointError, match="disk full"):
        save_checkpoint(path, learner)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["step2.pt"]


def test_extra_must_hold_plain_values(trained, tmp_path):
    learner, _ = trained
    with pytest.raises(CheckpointError, match=r"payload\.extra\.when"):
        save_checkpoint(tmp_path / "bad.pt", learner, extra={"when": np.float64(1.0)})


def test_a_checkpoint_with_an_older_config_field_set_still_loads(trained, tmp_path):
    """Configs are read by `amazons.core.config.config_from_dict`: fields added since take defaults,
    betas stored as a tuple (older saves) or a list compare equal, unknown fields are named."""
    learner, path = trained
    payload = load_checkpoint(path)
    older = dict(payload)
    older["optim_config"] = {key: value for key, value in payload["optim_config"].items()
                             if key not in ("policy_weight", "value_weight")}
    older["optim_config"]["betas"] = tuple(older["optim_config"]["betas"])
    older["net_config"] = {key: value for key, value in payload["net_config"].items()
                           if key != "attention_placement"}
    older.pop("torch_version")
    old_path = checkpoint_module._write(tmp_path / "older.pt", older)
    restored = learner_from_checkpoint(old_path)
    assert restored.config == learner.config and restored.model.config == learner.model.config
    restore_learner(old_path, make_learner())
    typo = {**older, "net_config": {**payload["net_config"], "chanels": 32}}
    with pytest.raises(CheckpointError,
                       match=r"typo\.pt: bad net config: NetConfig: unknown fields \['chanels'\]"):
        load_model_for_play(checkpoint_module._write(tmp_path / "typo.pt", typo))


# ------------------------------------------------------------------------------------------------
# The value head's kind (docs/network.md, board sizes)

# The shipped model's legal-move priors and values on 16 positions of seeded random games
# (`random_positions(16, seed=31, max_plies=50)`, stored with them), computed by the code before
# the value head had a kind (commit cd316b9) with `amazons.export.torch_outputs`, and the SHA-256
# of the checkpoint they came from.
BEFORE_VALUE_HEADS = Path(__file__).resolve().parent / "data" / "default_outputs.npz"


def test_checkpoints_from_before_the_value_head_field_load_flat_and_compute_what_they_did():
    path = default_checkpoint_path()
    assert "value_head" not in load_checkpoint(path)["net_config"]  # stored before the field
    with np.load(BEFORE_VALUE_HEADS, allow_pickle=False) as data:
        reference = {name: data[name] for name in data.files}
    assert reference["checkpoint_sha256"].tobytes().decode() \
        == hashlib.sha256(path.read_bytes()).hexdigest(), "the shipped model changed"
    model = load_model_for_play(path)
    assert model.config.value_head == "flat"
    priors, values = torch_outputs(model, reference["positions"])
    # Another computation of the same float32 forward pass (another CPU's kernels, maybe):
    # within the rounding of its longest sum, relative for the priors (test_growth).
    bound = rounding_bound(model.config)
    assert_close(priors, reference["priors"], rtol=bound, what="priors")
    assert_close(values, reference["values"], atol=bound, what="values")


def test_a_pooled_checkpoint_records_its_head_and_runs_on_every_size(tmp_path, batches):
    learner = make_learner(value_head="pooled", ownership_head=True)
    learner.train_step(batches[0])
    path = save_checkpoint(tmp_path / "pooled.pt", learner)
    assert load_checkpoint(path)["net_config"]["value_head"] == "pooled"
    assert learner_from_checkpoint(path).model.config.value_head == "pooled"
    model = load_model_for_play(path)
    assert model.config == learner.model.config
    for size in (6, 8, 10):  # the same weights on every board
        with torch.no_grad():
            output = model(torch.rand(3, 7, size, size).round())
        assert output.policy.move_logits.shape == (3, size * size, size * size)
        assert output.ownership.shape == (3, size * size) and output.value.shape == (3,)
        assert all(bool(torch.isfinite(tensor).all())
                   for tensor in (*output.policy, output.value, output.ownership))
    with pytest.raises(CheckpointError, match=r"value_head: checkpoint 'pooled', learner 'flat'"):
        restore_learner(path, make_learner(ownership_head=True))
