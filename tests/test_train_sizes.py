"""Training on boards other than Botzone's 8x8 (issue 51): the `board` field, self-play from the
board's start, replay chunks and checkpoints that record their board, the learner's targets and
symmetries on 10x10, and warm starts from an 8x8 model.

Runs are tiny (a couple of games of few simulations, a few learner steps); the learner's figures
are held to plain per-sample references written here.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from amazons import engine
from amazons.board import Board
from amazons.boards import board_spec
from amazons.core.config import config_to_dict
from amazons.neural.checkpoint import load_checkpoint, save_model
from amazons.neural.learner import (
    Learner,
    OptimConfig,
    SampleBatch,
    augment_batch,
    ownership_loss,
    policy_loss_terms,
)
from amazons.neural.model import PolicyValueNet, net_config
from amazons.train.command import main, resolve_config
from amazons.train.config import TrainConfig, apply_overrides, preset_config
from amazons.train.replay import (
    CHUNK_FORMAT_VERSION,
    GameSamples,
    ReplayBoardError,
    ReplayBuffer,
    load_chunk,
    save_chunk,
)
from amazons.train.run import ResumeError, Run

SMOKE = [
    "games_per_iteration=2",
    "selfplay.num_actors=1",
    "selfplay.games_in_parallel=2",
    "selfplay.search.simulations=4",
    "selfplay.start_jitter_s=0",
    "min_steps=2",
    "max_steps=2",
    "train_batch_size=16",
    "eval.every=2",
    "eval.games=2",
    "eval.simulations=4",
    "eval.processes=1",
]
# The plain (x, y) -> (x', y') maps of the 8 symmetries, in `amazons.symmetry`'s order, m = N - 1.
PLAIN_SYMMETRIES = (
    lambda x, y, m: (x, y), lambda x, y, m: (m - y, x), lambda x, y, m: (m - x, m - y),
    lambda x, y, m: (y, m - x), lambda x, y, m: (m - x, y), lambda x, y, m: (x, m - y),
    lambda x, y, m: (y, x), lambda x, y, m: (m - y, m - x),
)


def _first_difference(actual: np.ndarray, expected: np.ndarray, tolerance: float) -> str:
    bad = np.argwhere(np.abs(actual - expected) > tolerance)
    if not bad.size:
        return ""
    index = tuple(bad[0])
    return (f"{bad.shape[0]} entries differ; first at {index}: {actual[index]} vs "
            f"{expected[index]}")


# ------------------------------------------------------------------------------------------------
# The config


def test_a_board_override_makes_the_presets_flat_value_head_pooled_and_flat_is_refused_off_8x8():
    config = apply_overrides(preset_config("cpu"), ["board=standard10"])
    assert config.board_spec.size == 10 and config.net.value_head == "pooled"
    assert apply_overrides(preset_config("cpu"), ["board=botzone8"]).net.value_head == "flat"
    with pytest.raises(ValueError, match="use net.value_head=pooled"):
        apply_overrides(preset_config("cpu"), ["board=standard10", "net.value_head=flat"])
    with pytest.raises(ValueError, match="unknown board 'chess'"):
        apply_overrides(preset_config("cpu"), ["board=chess"])
    with pytest.raises(ValueError, match="6x6: the flat value head"):
        TrainConfig(board="openspiel6")


# ------------------------------------------------------------------------------------------------
# Replay chunks and their board


def _one_game(board_name: str) -> GameSamples:
    """A real two-position game record on `board_name` (the start and one legal move later)."""
    board = Board(start=board_name)
    squares = board.num_squares
    positions, moves, turns = [], [], []
    for _ in range(2):
        positions.append(board.canonical_position())
        legal = board.legal_move_array()
        moves.append(legal[:3])
        turns.append(board.turn)
        board.push(board.legal_moves()[0])
    return GameSamples(
        positions=np.stack(positions).astype(np.uint64),
        label_moves=np.concatenate(moves).astype(np.int32), label_visits=None,
        label_policy=np.full(6, 1 / 3, np.float32),
        label_offsets=np.array([0, 3, 6], np.int64), z=np.array([1, -1], np.int8),
        played_moves=np.zeros((2, 3), np.int32), game_offsets=np.array([0, 2], np.int64),
        ownership=np.zeros((1, squares), np.int8), ownership_mask=np.ones((1, squares), bool),
        ownership_sign=np.where(np.array(turns) == 0, 1, -1).astype(np.int8),
        board=board_spec(board_name))


def test_chunks_record_their_board_and_older_chunks_load_as_botzone8(tmp_path):
    game = _one_game("standard10")
    save_chunk(tmp_path / "chunk-00000000.npz", game)
    assert CHUNK_FORMAT_VERSION == 6
    loaded = load_chunk(tmp_path / "chunk-00000000.npz")
    assert loaded.board == board_spec("standard10") and loaded.positions.shape == (2, 6)
    # A version 5 chunk (before boards were recorded) is botzone8's.
    old = _one_game("botzone8")
    arrays = {key: getattr(old, key) for key in (
        "positions", "label_moves", "label_policy", "label_offsets", "z", "played_moves",
        "game_offsets", "policy_weight", "ownership", "ownership_mask", "ownership_sign",
        "sample_weight")}
    arrays["label_moves"] = arrays["label_moves"].astype(np.uint8)
    arrays["label_policy"] = arrays["label_policy"].astype(np.float16)
    np.savez_compressed(tmp_path / "old.npz", format_version=np.array(5), **arrays)
    assert load_chunk(tmp_path / "old.npz").board == board_spec("botzone8")


def test_the_window_refuses_games_and_chunks_of_another_board_by_name(tmp_path):
    replay = ReplayBuffer(tmp_path / "replay", 100, board=board_spec("standard10"))
    replay.add(_one_game("standard10"))
    with pytest.raises(ReplayBoardError, match="botzone8 board .8x8.*standard10"):
        replay.add(_one_game("botzone8"))
    replay.close()
    sample = replay.sample(4)
    assert sample["positions"].shape == (4, 6) and sample["ownership"].shape == (4, 100)
    save_chunk(tmp_path / "replay" / "chunk-00000001.npz", _one_game("openspiel6"))
    with pytest.raises(ReplayBoardError, match="chunk-00000001.npz: played on the openspiel6"):
        ReplayBuffer(tmp_path / "replay", 100, board=board_spec("standard10"))


# ------------------------------------------------------------------------------------------------
# The learner on 10x10, against plain references


def _batch_10x10(rng: np.random.Generator) -> SampleBatch:
    """Four real 10x10 positions with random labels over their legal moves and ownership maps."""
    board = Board(start="standard10")
    positions, moves, probs, offsets = [], [], [], [0]
    for _ in range(4):
        positions.append(board.canonical_position())
        legal = board.legal_move_array()
        chosen = legal[rng.choice(legal.shape[0], size=5, replace=False)]
        weights = rng.random(5) + 0.1
        moves.append(chosen)
        probs.append(weights / weights.sum())
        offsets.append(offsets[-1] + 5)
        board.push(board.legal_moves()[int(rng.integers(legal.shape[0]))])
    return SampleBatch(np.stack(positions).astype(np.uint64),
                       np.concatenate(moves).astype(np.int32),
                       np.concatenate(probs).astype(np.float32), np.array(offsets, np.int64),
                       rng.choice([-1.0, 1.0], 4).astype(np.float32),
                       ownership=rng.integers(-1, 2, (4, 100)).astype(np.int8),
                       ownership_mask=rng.random((4, 100)) < 0.8, board_size=10)


def test_augmentation_on_10x10_moves_positions_labels_and_ownership_like_the_plain_maps():
    batch = _batch_10x10(np.random.default_rng(5))
    for symmetries in ([0, 1, 2, 3], [4, 5, 6, 7]):
        _check_augmented(batch, augment_batch(batch, symmetries=np.array(symmetries)), symmetries)


def _check_augmented(batch: SampleBatch, augmented: SampleBatch, symmetries: list[int]) -> None:
    features = engine.features(batch.positions, size=10)
    moved = engine.features(augmented.positions, size=10)
    for row, k in enumerate(symmetries):
        image = np.empty(100, np.int64)
        for square in range(100):
            x, y = PLAIN_SYMMETRIES[k](square % 10, square // 10, 9)
            image[square] = y * 10 + x
        expected = np.empty_like(features[row]).reshape(features.shape[1], 100)
        expected[:, image] = features[row].reshape(features.shape[1], 100)
        # mobility planes are counts of the same moves: exact, as the positions' own planes
        assert np.array_equal(moved[row].reshape(-1, 100), expected), f"symmetry {k}"
        labels = slice(batch.label_offsets[row], batch.label_offsets[row + 1])
        assert np.array_equal(augmented.label_moves[labels], image[batch.label_moves[labels]])
        owned = np.empty(100, np.int8)
        owned[image] = batch.ownership[row]
        assert np.array_equal(augmented.ownership[row], owned)
    assert np.array_equal(augmented.label_probs, batch.label_probs)


def test_policy_targets_and_losses_on_10x10_match_a_plain_per_label_sum():
    rng = np.random.default_rng(6)
    batch = _batch_10x10(rng)
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny", value_head="pooled", ownership_head=True)).eval()
    learner = Learner(model, OptimConfig(channels_last=False))
    features, labels = learner.prepare(batch)
    assert features.shape == (4, model.config.num_planes, 10, 10)
    assert labels.move_targets.shape == (4, 100 * 100)
    move_targets = np.zeros((4, 10_000))
    arrow_targets = np.zeros((4, 10_000))
    for row in range(4):
        for entry in range(batch.label_offsets[row], batch.label_offsets[row + 1]):
            src, dst, arrow = batch.label_moves[entry].tolist()
            move_targets[row, src * 100 + dst] += batch.label_probs[entry]
            arrow_targets[row, dst * 100 + arrow] += batch.label_probs[entry]
    # sums of at most 5 float32 probabilities: a few float32 ulps of 1
    message = _first_difference(labels.move_targets.numpy(), move_targets, 1e-6)
    assert not message, message
    message = _first_difference(labels.arrow_targets.numpy(), arrow_targets, 1e-6)
    assert not message, message
    with torch.no_grad():
        output = model(features)
        terms = policy_loss_terms(output.policy, labels)
        gathered = policy_loss_terms(output.policy, labels._replace(move_targets=None,
                                                                    arrow_targets=None))
        log_move = torch.log_softmax(output.policy.move_logits.double().reshape(4, -1), -1)
        log_arrow = torch.log_softmax(output.policy.arrow_logits.double(), -1)
        plain_move = plain_arrow = 0.0
        for row in range(4):
            for entry in range(batch.label_offsets[row], batch.label_offsets[row + 1]):
                src, dst, arrow = batch.label_moves[entry].tolist()
                plain_move -= batch.label_probs[entry] * float(log_move[row, src * 100 + dst])
                plain_arrow -= batch.label_probs[entry] * float(log_arrow[row, dst, arrow])
        plain_ownership = float((batch.ownership_mask * (output.ownership.double().numpy()
                                                         - batch.ownership) ** 2).sum()) / 400
        computed_ownership = float(ownership_loss(output.ownership, labels))
    # float32 log-softmax over 10,000 logits of order 1 against float64: ~1e-5 relative
    for name, plain in (("policy_move", plain_move / 4), ("policy_arrow", plain_arrow / 4)):
        assert float(terms[name]) == pytest.approx(plain, rel=1e-5), name
        assert float(gathered[name]) == pytest.approx(plain, rel=1e-5), name
    assert computed_ownership == pytest.approx(plain_ownership, rel=1e-5)
    metrics = learner.train_step(batch)
    assert np.isfinite(metrics["loss"]) and metrics["policy_entropy"] > 0


# ------------------------------------------------------------------------------------------------
# Warm starts from 8x8, and freezing what they carried


def test_init_from_an_8x8_flat_model_starts_a_10x10_run_training_the_new_head_first(tmp_path):
    torch.manual_seed(1)
    flat = PolicyValueNet(net_config("tiny"))
    source = save_model(tmp_path / "flat8.pt", flat)
    args = argparse.Namespace(run_dir=tmp_path / "run", resume=False, preset="cpu",
                              overrides=["board=standard10", "optim.freeze_carried_steps=2",
                                         "optim.channels_last=false"],
                              iterations=1, init=str(source))
    config = resolve_config(args)
    assert config.net.value_head == "pooled" and config.init_model == str(source.resolve())
    run = Run(config, args.run_dir, resume=False)
    try:
        model = run.learner.model
        assert torch.equal(model.state_dict()["trunk.0.conv1.conv.weight"],
                           flat.state_dict()["trunk.0.conv1.conv.weight"])
        assert "value_head.hidden.weight" not in run.learner.frozen
        assert "trunk.0.conv1.conv.weight" in run.learner.frozen
        before = {name: value.clone() for name, value in model.state_dict().items()}
        batch = _batch_10x10(np.random.default_rng(7))
        for _ in range(2):
            run.learner.train_step(batch)
        after = model.state_dict()
        for name in run.learner.frozen:
            assert torch.equal(after[name], before[name]), name
        # a frozen batch norm keeps its statistics too
        assert torch.equal(after["trunk.0.conv1.bn.running_mean"],
                           before["trunk.0.conv1.bn.running_mean"])
        assert not torch.equal(after["value_head.hidden.weight"],
                               before["value_head.hidden.weight"])
        for _ in range(2):  # past the frozen steps everything trains (the zero-initialized
            run.learner.train_step(batch)  # output layers pass the trunk a gradient from step 2)
        assert not torch.equal(model.state_dict()["trunk.0.conv1.conv.weight"],
                               before["trunk.0.conv1.conv.weight"])
    finally:
        run.close()


def test_resume_refuses_a_checkpoint_of_another_board(tmp_path):
    config = apply_overrides(preset_config("cpu"), ["net.value_head=pooled"])
    run = Run(config, tmp_path / "run", resume=False)
    run.checkpoint()
    run.close()
    other = apply_overrides(config, ["board=standard10"])
    with pytest.raises(ResumeError, match="botzone8 board .8x8.*standard10"):
        Run(other, tmp_path / "run", resume=True)
    (tmp_path / "run" / "config.json").write_text(json.dumps(config_to_dict(config)))
    args = argparse.Namespace(run_dir=tmp_path / "run", resume=True, preset=None,
                              overrides=["board=standard10"], iterations=None, init=None)
    with pytest.raises(SystemExit, match="cannot change the board .botzone8 -> standard10"):
        resolve_config(args)


# ------------------------------------------------------------------------------------------------
# Real runs


@pytest.mark.slow
@pytest.mark.parametrize(("board", "size", "opponents", "mode"), [
    ("openspiel6", 6, "previous,random", "sync"),
    ("standard10", 10, "previous,random,classical", "async"),  # the preset's pipeline
])
def test_a_run_on_another_board_plays_trains_evaluates_resumes_and_records_it(
        tmp_path, capsys, board, size, opponents, mode):
    run_dir = tmp_path / "run"
    assert main(["--preset", "cpu", "--run-dir", str(run_dir), "--iterations", "1",
                 "--no-progress", f"board={board}", *SMOKE, f"eval.opponents={opponents}",
                 f"pipeline.mode={mode}"]) == 0
    stored = json.loads((run_dir / "config.json").read_text())
    assert stored["board"] == board and stored["net"]["value_head"] == "pooled"
    chunks = sorted((run_dir / "replay").glob("chunk-*.npz"))
    chunk = load_chunk(chunks[0])
    assert chunk.board == board_spec(board)
    assert chunk.positions.shape[1] == engine.geometry(size).position_width
    assert chunk.ownership.shape[1] == size * size
    start = Board(start=board).canonical_position()
    first_positions = chunk.positions[chunk.game_offsets[:-1]]
    assert (first_positions == start).all()  # every game from the board's start
    extra = load_checkpoint(run_dir / "checkpoints" / "latest.pt")["extra"]
    assert board_spec(extra["board"]) == board_spec(board)
    assert board_spec(load_checkpoint(run_dir / "models" / "model-0001.pt")["extra"]["board"]) \
        == board_spec(board)
    records = (run_dir / "games" / "selfplay.txt").read_text()
    assert records.count(f'[Board "{board}"]') == records.count("[Event ")
    assert main(["--run-dir", str(run_dir), "--iterations", "2", "--resume",
                 "--no-progress"]) == 0
    lines = [json.loads(line) for line in
             (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["iteration"] for line in lines] == [1, 2]
    assert "eval/elo" in lines[-1] and lines[-1]["train/learner_step"] == 4
    names = {match["b"] for match in json.loads((run_dir / "elo.json").read_text())["matches"]}
    assert names == {"iter-0001", *opponents.split(",")[1:]}
    # A replay chunk of another board in the run's replay is refused by name.
    save_chunk(run_dir / "replay" / "chunk-00000099.npz", _one_game("botzone8"))
    with pytest.raises(SystemExit):
        main(["--run-dir", str(run_dir), "--iterations", "3", "--resume", "--no-progress"])
    assert "chunk-00000099.npz: played on the botzone8 board" in capsys.readouterr().err


def test_a_ray_node_hands_its_games_over_with_their_board():
    from amazons.distributed.node import owned_samples

    game = _one_game("standard10")
    owned = owned_samples(game)
    owned.validate()
    assert owned.board == board_spec("standard10")
    assert not np.shares_memory(owned.positions, game.positions)
