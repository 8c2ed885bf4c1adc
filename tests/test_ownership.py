"""The ownership target and head (issue 12): the target against a plain breadth-first search, its
sign and frame per sample, symmetry augmentation, replay chunk formats, the head and its loss,
old checkpoints, the numpy forward pass, what players show, and a real run of the main job.

The reference target is computed in the oracle's square sets (`tests/oracle.py`), from the final
position as the game's own board gives it, and moved into each sample's frame with the oracle's
180-degree rotation: never through `amazons.symmetry` or `GameSamples.ownership_targets`.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import oracle
import pytest
import torch
from test_adjudication import territory_reference
from test_npnet import random_model

from amazons import engine
from amazons.board import BLACK, WHITE, Board, Move
from amazons.botzone.bot import Bot
from amazons.core.config import config_from_dict, config_to_dict
from amazons.export import TOLERANCE, export_model, random_positions
from amazons.mcts import BatchedSearch, SearchConfig, UniformEvaluator
from amazons.models import default_model_path
from amazons.neural import numpy_net
from amazons.neural.checkpoint import (
    content_digest,
    learner_from_checkpoint,
    load_model_for_play,
    restore_learner,
    save_checkpoint,
)
from amazons.neural.cuda_graphs import NetworkEvaluator
from amazons.neural.learner import (
    Learner,
    OptimConfig,
    SampleBatch,
    augment_batch,
    label_tensors,
    ownership_loss,
)
from amazons.neural.model import (
    NetConfig,
    NetConfigError,
    NetInputError,
    PolicyValueNet,
    count_parameters,
    net_config,
    prepare_for_inference,
)
from amazons.play import PlaySession
from amazons.players.factory import build_model_player
from amazons.players.player import MCTSPlayer, describe_territory, predicted_territory
from amazons.symmetry import NUM_SYMMETRIES, SYMMETRIES
from amazons.train.command import main
from amazons.train.replay import GameSamples, ReplayBuffer, ReplayChunkError, load_chunk, save_chunk
from amazons.train.selfplay import final_ownership, play_games

torch.set_num_threads(1)

SEARCH = SearchConfig(simulations=8, leaves_per_game=4, root_noise=True, temperature_moves=56,
                      edge_capacity=1 << 15, node_capacity=64)


# ---------------------------------------------------------------------------------------------
# The reference target, in oracle square sets


def final_triple(board: Board, side: int) -> tuple[frozenset, frozenset, frozenset]:
    """The final position as `side`'s canonical triple: White's view is the real board turned by
    180 degrees (docs/ARCHITECTURE.md)."""
    black, white, arrows = (oracle.squares_of(bits) for bits in board.bitboards())
    if side == BLACK:
        return black, white, arrows
    half_turn = oracle.D4_TRANSFORMS["rotate_half"]
    return tuple(oracle.map_squares(half_turn, part) for part in (white, black, arrows))


def reference_target(mine: frozenset, theirs: frozenset,
                     arrows: frozenset) -> tuple[np.ndarray, np.ndarray]:
    """`(target (64,) int8, mask (64,) bool)` of a triple: queen-distance territory by a plain
    breadth-first search, amazons to their side, arrows masked."""
    target = territory_reference(mine, theirs, arrows)
    for squares, owner in ((mine, 1), (theirs, -1)):
        target[[oracle.square_index(square) for square in squares]] = owner
    mask = np.ones(64, np.bool_)
    mask[[oracle.square_index(square) for square in arrows]] = False
    target[~mask] = 0
    return target, mask


def random_engine_game(seed: int, adjudicate: bool) -> Board:
    """A uniformly random game played with the engine, to its end or to its adjudication."""
    rng = np.random.default_rng(seed)
    board = Board()
    while not board.is_game_over():
        moves = board.legal_move_array()
        board.push(Move(*moves[rng.integers(moves.shape[0])].tolist()))
        if adjudicate and not board.is_game_over() and board.adjudicate() is not None:
            break
    return board


def self_play(count: int, seed: int, adjudicate: bool) -> list[tuple[GameSamples, Board]]:
    games = []
    search = BatchedSearch(UniformEvaluator(), SEARCH, num_games=3, seed=seed)
    play_games(search, count,
               lambda samples, moves, verdict: games.append((samples, Board.from_moves(moves))),
               adjudicate=adjudicate)
    return games


@pytest.fixture(scope="module")
def games() -> list[tuple[GameSamples, Board]]:
    """Self-play games played to the end and adjudicated ones, with their final boards."""
    played = self_play(3, seed=0, adjudicate=False) + self_play(6, seed=1, adjudicate=True)
    assert any(board.is_game_over() for _, board in played)
    assert any(not board.is_game_over() for _, board in played)  # some were adjudicated
    return played


# ---------------------------------------------------------------------------------------------
# The target


@pytest.mark.parametrize("adjudicate", [False, True], ids=["finished", "adjudicated"])
def test_final_ownership_matches_a_breadth_first_search(adjudicate):
    ended_early = 0
    for seed in range(6):
        board = random_engine_game(seed, adjudicate)
        ended_early += not board.is_game_over()
        ownership, mask = final_ownership(board)
        assert ownership.dtype == np.int8 and mask.dtype == np.bool_
        # real frame: Black's view
        expected, expected_mask = reference_target(*final_triple(board, BLACK))
        np.testing.assert_array_equal(ownership, expected)
        np.testing.assert_array_equal(mask, expected_mask)
        assert (ownership == 1).sum() >= 4 and (ownership == -1).sum() >= 4  # the amazons
    assert (ended_early > 0) == adjudicate


def test_samples_carry_their_games_final_ownership(games):
    for samples, board in games:
        ownership, mask = final_ownership(board)
        np.testing.assert_array_equal(samples.ownership, ownership[None])
        np.testing.assert_array_equal(samples.ownership_mask, mask[None])
        turns = [BLACK if ply % 2 == 0 else WHITE for ply in range(board.ply)]
        np.testing.assert_array_equal(samples.ownership_sign,
                                      np.where(np.array(turns) == BLACK, 1, -1))


def test_each_sample_sees_the_target_from_its_side_to_move_in_its_frame(games):
    for samples, board in games:
        targets, masks = samples.ownership_targets(np.arange(samples.num_positions))
        for index in range(samples.num_positions):
            side = BLACK if index % 2 == 0 else WHITE
            expected, expected_mask = reference_target(*final_triple(board, side))
            np.testing.assert_array_equal(targets[index], expected)
            np.testing.assert_array_equal(masks[index], expected_mask)
            # Arrows never leave: those already on the sample's own board are masked in its frame.
            arrows = [oracle.square_index(square)
                      for square in oracle.squares_of(samples.positions[index, 2])]
            assert not masks[index, arrows].any()


def test_the_loser_of_a_finished_game_owns_only_its_amazons(games):
    # At the end of a game played out, the side to move has no move, so its amazons reach
    # nothing: from the loser's view (z = -1) the +1 squares are its four amazons, and from the
    # winner's view the -1 squares are the loser's four amazons.
    checked = 0
    for samples, board in games:
        if not board.is_game_over():
            continue
        targets, _ = samples.ownership_targets(np.arange(samples.num_positions))
        lost = samples.z == -1
        assert ((targets[lost] == 1).sum(axis=1) == 4).all()
        assert ((targets[~lost] == -1).sum(axis=1) == 4).all()
        checked += 1
    assert checked


def test_augmentation_moves_the_map_with_the_board(games):
    for k in range(NUM_SYMMETRIES):  # the library's transform k is the oracle's k-th map
        transform = list(oracle.D4_TRANSFORMS.values())[k]
        assert ([oracle.square_index(transform(*oracle.square_at(s))) for s in range(64)]
                == SYMMETRIES[k].tolist())
    samples, board = games[-1]
    count = samples.num_positions
    targets, masks = samples.ownership_targets(np.arange(count))
    batch = SampleBatch(samples.positions, samples.label_moves, samples.label_policy,
                        samples.label_offsets, samples.z.astype(np.float32), ownership=targets,
                        ownership_mask=masks)
    symmetries = np.arange(count) % NUM_SYMMETRIES
    turned = augment_batch(batch, symmetries=symmetries)
    for index, k in enumerate(symmetries.tolist()):
        transform = list(oracle.D4_TRANSFORMS.values())[k]
        side = BLACK if index % 2 == 0 else WHITE
        moved = [oracle.map_squares(transform, part)
                 for part in oracle.triple_of(samples.positions[index])]
        assert [oracle.squares_of(bits) for bits in turned.positions[index]] == moved  # the planes
        final = [oracle.map_squares(transform, part) for part in final_triple(board, side)]
        expected, expected_mask = reference_target(*final)
        np.testing.assert_array_equal(turned.ownership[index], expected)
        np.testing.assert_array_equal(turned.ownership_mask[index], expected_mask)
    selected = turned.select([3, 1])
    np.testing.assert_array_equal(selected.ownership, turned.ownership[[3, 1]])
    joined = SampleBatch.concatenate([selected, batch])
    np.testing.assert_array_equal(joined.ownership_mask[2:], batch.ownership_mask)


# ---------------------------------------------------------------------------------------------
# Replay chunks


def test_chunks_round_trip_the_target_and_the_buffer_serves_it(tmp_path, games):
    samples = GameSamples.concatenate([game[0] for game in games])
    assert (samples.ownership.shape == (len(games), 64)
            and samples.ownership_sign.shape == (samples.num_positions,))
    path = tmp_path / "chunk-00000000.npz"
    save_chunk(path, samples)
    assert int(np.load(path)["format_version"]) == 5
    loaded = load_chunk(path)
    for name in ("ownership", "ownership_mask", "ownership_sign"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(samples, name))
    buffer = ReplayBuffer(tmp_path, window_positions=10_000, seed=3)
    drawn = buffer.sample(200)
    batch = SampleBatch(**drawn)
    targets, masks = samples.ownership_targets(np.arange(samples.num_positions))
    by_position: dict[tuple[int, ...], list[tuple[bytes, bytes]]] = {}
    for position, target, mask in zip(samples.positions.tolist(), targets, masks, strict=True):
        by_position.setdefault(tuple(position), []).append((target.tobytes(), mask.tobytes()))
    for position, target, mask in zip(batch.positions.tolist(), batch.ownership,
                                      batch.ownership_mask, strict=True):
        assert (target.tobytes(), mask.tobytes()) in by_position[tuple(position)]
    assert batch.ownership_mask.any(axis=1).all()


@pytest.mark.parametrize("version", [1, 2])
def test_chunks_of_older_formats_load_without_a_target(tmp_path, games, version):
    samples = GameSamples.concatenate([game[0] for game in games[:2]])
    keys = ["positions", "label_moves", "label_visits", "label_policy", "label_offsets", "z",
            "played_moves", "game_offsets"]
    arrays = {key: getattr(samples, key) for key in keys}
    if version == 2:
        arrays.update(policy_weight=samples.policy_weight, format_version=np.array(2, np.int64))
    path = tmp_path / "chunk-00000000.npz"
    np.savez_compressed(path, **arrays)
    loaded = load_chunk(path)
    assert loaded.ownership.shape == (2, 64) and not loaded.ownership_mask.any()
    assert (loaded.ownership_sign == 0).all()
    batch = SampleBatch(**ReplayBuffer(tmp_path, window_positions=10_000).sample(32))
    assert not batch.ownership_mask.any() and not batch.ownership.any()


def test_chunks_with_a_bad_target_are_refused(tmp_path, games):
    samples = GameSamples.concatenate([games[0][0]])
    samples.ownership[0, 5] = 2
    with pytest.raises(ReplayChunkError, match="ownership"):
        save_chunk(tmp_path / "chunk-00000000.npz", samples)
    samples = GameSamples.concatenate([games[0][0]])
    samples.ownership_sign = samples.ownership_sign[:-1]
    with pytest.raises(ReplayChunkError, match="ownership_sign"):
        save_chunk(tmp_path / "chunk-00000001.npz", samples)


# ---------------------------------------------------------------------------------------------
# The head and its loss


def test_the_head_is_switched_by_config_and_maps_squares_to_minus_one_to_one():
    torch.manual_seed(0)
    plain = PolicyValueNet(net_config("tiny"))
    torch.manual_seed(0)
    model = PolicyValueNet(net_config("tiny", ownership_head=True))
    assert not hasattr(plain, "ownership_head")
    head = model.ownership_head
    assert (count_parameters(model) - count_parameters(plain) == count_parameters(head)
            == 32 * 16 + 2 * 16 + 16 + 1)
    with torch.no_grad():
        head.out.weight.mul_(40.0)  # push some squares into tanh's tails
        features = torch.from_numpy(engine.features(random_positions(6, seed=2), 7))
        output = model(features)
        assert output.ownership.shape == (6, 64) and output.ownership.abs().max() <= 1.0
        assert output.ownership.abs().max() > 0.9
        assert model(features, with_ownership=False).ownership is None
        assert plain(features).ownership is None
    with pytest.raises(NetConfigError, match="ownership_head"):
        net_config("tiny", ownership_head="yes")
    stored = config_to_dict(net_config("tiny"))
    del stored["ownership_head"], stored["ownership_channels"]
    # configs written before the field
    assert config_from_dict(NetConfig, stored) == net_config("tiny")


def test_the_evaluator_answers_ownership_and_keeps_the_search_path_unchanged():
    torch.manual_seed(1)
    model = PolicyValueNet(net_config("tiny", ownership_head=True)).eval()
    positions = random_positions(5, seed=4)
    moves, offsets = engine.legal_moves(positions)
    evaluator = NetworkEvaluator(model, 7)
    with torch.no_grad():
        output = model(torch.from_numpy(engine.features(positions, 7)))
    np.testing.assert_allclose(evaluator.ownership(positions), output.ownership.numpy(), atol=1e-6)
    prepared = NetworkEvaluator(prepare_for_inference(model), 7)
    np.testing.assert_allclose(prepared.ownership(positions), output.ownership.numpy(), atol=1e-5)
    torch.manual_seed(1)
    plain = PolicyValueNet(net_config("tiny")).eval()
    plain.load_state_dict({key: value for key, value in model.state_dict().items()
                           if not key.startswith("ownership_head.")})
    for have, want in zip(evaluator.evaluate(positions, moves, offsets),
                          NetworkEvaluator(plain, 7).evaluate(positions, moves, offsets),
                          strict=True):
        np.testing.assert_array_equal(have, want)
    assert evaluator.has_ownership and not NetworkEvaluator(plain, 7).has_ownership
    with pytest.raises(NetInputError, match="no ownership head"):
        NetworkEvaluator(plain, 7).ownership(positions)


def targets_batch(games, count: int = 24) -> SampleBatch:
    samples = GameSamples.concatenate([game[0] for game in games])
    indices = np.linspace(0, samples.num_positions - 1, count).astype(np.int64)
    targets, masks = samples.ownership_targets(indices)
    label_starts = samples.label_offsets[indices]
    label_counts = samples.label_offsets[indices + 1] - label_starts
    rows = np.concatenate([np.arange(start, start + length) for start, length in
                           zip(label_starts.tolist(), label_counts.tolist(), strict=True)])
    offsets = np.concatenate([[0], np.cumsum(label_counts)]).astype(np.int64)
    return SampleBatch(samples.positions[indices], samples.label_moves[rows],
                       samples.label_policy[rows], offsets, samples.z[indices].astype(np.float32),
                       ownership=targets, ownership_mask=masks)


def test_the_loss_counts_masked_squares_per_sixty_four_over_samples_with_a_target(games):
    batch = targets_batch(games, 6)
    mask = batch.ownership_mask.copy()
    mask[1] = False  # a sample without a target (an old chunk's)
    batch = SampleBatch(batch.positions, batch.label_moves, batch.label_probs, batch.label_offsets,
                        batch.z, ownership=batch.ownership, ownership_mask=mask)
    predicted = torch.linspace(-0.9, 0.9, 6 * 64).reshape(6, 64)
    loss = float(ownership_loss(predicted, label_tensors(batch)))
    squared = (predicted.numpy() - batch.ownership) ** 2
    expected = sum(squared[row][mask[row]].sum() / 64 for row in (0, 2, 3, 4, 5)) / 5
    assert loss == pytest.approx(expected, rel=1e-6)
    empty = SampleBatch(batch.positions, batch.label_moves, batch.label_probs, batch.label_offsets,
                        batch.z)
    assert float(ownership_loss(predicted, label_tensors(empty))) == 0.0


@pytest.mark.parametrize("weight", [0.0, 1.5])
def test_the_term_is_weighted_and_trains_nothing_at_weight_zero(games, weight):
    batch = targets_batch(games)
    torch.manual_seed(0)
    learner = Learner(PolicyValueNet(net_config("tiny", ownership_head=True)),
                      OptimConfig(lr=1e-3, warmup_steps=0, weight_decay=0.0,
                                  ownership_weight=weight), seed=0)
    before = {name: value.clone()
              for name, value in learner.model.ownership_head.named_parameters()}
    metrics = learner.train_step(batch)
    assert math.isfinite(metrics["ownership_loss"]) and metrics["ownership_loss"] > 0
    expected = metrics["policy_loss"] + metrics["value_mse"] + weight * metrics["ownership_loss"]
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5)
    gradients = [parameter.grad for parameter in learner.model.ownership_head.parameters()]
    moved = any(not torch.equal(before[name], value)
                for name, value in learner.model.ownership_head.named_parameters())
    if weight == 0:
        assert all(gradient is None or not gradient.any() for gradient in gradients) and not moved
    else:
        assert any(gradient.abs().sum() > 0 for gradient in gradients) and moved
    plain = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(lr=1e-3, warmup_steps=0),
                    seed=0)
    assert "ownership_loss" not in plain.train_step(batch)


def test_the_head_learns_the_target_of_a_fixed_batch(games):
    batch = targets_batch(games, 32)
    torch.manual_seed(0)
    learner = Learner(PolicyValueNet(net_config("tiny", ownership_head=True)),
                      OptimConfig(lr=3e-3, warmup_steps=0, schedule="constant"), seed=0)
    losses = [learner.train_step(batch)["ownership_loss"] for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]


def test_old_checkpoints_without_the_fields_load(tmp_path, games):
    learner = Learner(PolicyValueNet(net_config("tiny")), OptimConfig(warmup_steps=0), seed=0)
    learner.train_step(targets_batch(games, 8))
    path = tmp_path / "old.pt"
    save_checkpoint(path, learner)
    document = torch.load(path, weights_only=True)
    payload = document["payload"]
    for name in ("ownership_head", "ownership_channels"):
        del payload["net_config"][name]
    del payload["optim_config"]["ownership_weight"]
    document["sha256"] = content_digest(payload)
    torch.save(document, path)
    assert load_model_for_play(path).config == net_config("tiny")
    assert learner_from_checkpoint(path).config == OptimConfig(warmup_steps=0)
    restore_learner(path, Learner(PolicyValueNet(net_config("tiny")), OptimConfig(warmup_steps=0),
                                  seed=1))


# ---------------------------------------------------------------------------------------------
# The numpy forward pass and the exported file


def random_head_model(head: str = "joint", seed: int = 0) -> PolicyValueNet:
    model = random_model("tiny", head, seed, ownership_head=True)
    with torch.no_grad():
        model.ownership_head.out.weight.mul_(10.0)  # maps spread over [-1, 1]
    return model.eval()


@pytest.fixture(scope="module")
def head_model_file(tmp_path_factory) -> str:
    path, _ = export_model(random_head_model(), tmp_path_factory.mktemp("model") / "head.npz")
    return str(path)


@pytest.mark.parametrize("head", ["joint", "factorized"])
def test_numpy_matches_torch_with_the_head(tmp_path, head):
    model = random_head_model(head, seed=3)
    path, differences = export_model(model, tmp_path / "head.npz", check_positions=48)
    assert set(differences) == {"priors", "values", "ownership"}
    assert max(differences.values()) <= TOLERANCE
    net = numpy_net.load_model(path)
    assert net.has_ownership and json.loads(np.load(path)["header"].tobytes())["version"] == 2
    positions = random_positions(16, seed=7)
    expected = NetworkEvaluator(model, 7).ownership(positions)
    got = numpy_net.NumpyEvaluator(net).ownership(positions)
    assert np.abs(got - expected).max() <= TOLERANCE and np.abs(expected).max() > 0.5


def test_files_without_the_head_and_version_one_files_load(tmp_path):
    # The model shipped before the ownership head, kept as a version 1 file.
    version_one = Path(__file__).parent / "data" / "default_v1.npz"
    shipped = numpy_net.load_model(version_one)
    assert json.loads(np.load(version_one)["header"].tobytes())["version"] == 1
    assert not shipped.has_ownership
    with pytest.raises(numpy_net.NpNetInputError, match="no ownership head"):
        numpy_net.NumpyEvaluator(shipped).ownership(random_positions(2))
    torch.manual_seed(0)
    path, differences = export_model(PolicyValueNet(net_config("tiny")), tmp_path / "plain.npz")
    assert set(differences) == {"priors", "values"} and not numpy_net.load_model(path).has_ownership
    header = json.loads(np.load(path)["header"].tobytes())
    arrays = dict(np.load(path))
    future = max(numpy_net.READABLE_VERSIONS) + 1
    header["version"] = future
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(numpy_net.ModelFileError, match=f"version {future}"):
        numpy_net.load_model(tmp_path / "future.npz")


# ---------------------------------------------------------------------------------------------
# What players show


class _FixedOwnership:
    """An evaluator stand-in whose ownership head says +1 on the given canonical squares."""

    has_ownership = True

    def __init__(self, squares: list[int]) -> None:
        self.map = np.zeros((1, 64), np.float32)
        self.map[0, squares] = 1.0

    def ownership(self, positions: np.ndarray) -> np.ndarray:
        return self.map


def test_predicted_territory_is_blacks_lead_over_the_squares_without_arrows():
    board = Board.from_moves(["c8-c6/d7", "c1-c3/b2", "c6-e6/e2"])  # White to move
    arrows = [oracle.square_index(square)
              for square in oracle.squares_of(board.canonical_position()[2])]
    # arrows, in the canonical frame
    assert predicted_territory(_FixedOwnership(arrows), board) == 0.0
    # White's squares
    assert predicted_territory(_FixedOwnership(list(range(64))), board) == -(64 - 3)
    board.push(Move.parse("f1-f2/g2"))  # Black to move
    assert predicted_territory(_FixedOwnership(list(range(64))), board) == 64 - 4
    assert predicted_territory(UniformEvaluator(), board) is None
    assert describe_territory(5.24) == "net territory: Black +5.2"
    assert describe_territory(-0.05) == "net territory: White +0.1"


def test_hint_and_the_bots_debug_line_show_the_balance_only_with_the_head(head_model_file):
    shown = {}
    for name, model in (("head", head_model_file), ("plain", str(default_model_path()))):
        evaluator = numpy_net.NumpyEvaluator.from_file(model)
        out = io.StringIO()
        session = PlaySession(MCTSPlayer(evaluator, SearchConfig(simulations=8), seed=0), BLACK,
                              io.StringIO("hint\nquit\n"), out)
        session.run()
        bot = Bot(build_model_player(model, simulations=8, seed=0, stop_when_full=True))
        bot.reply([])  # the bot plays Black's first move
        shown[name] = (out.getvalue(), bot.debug_text())
        expected = predicted_territory(evaluator, bot.board) if name == "head" else None
        if expected is not None:
            assert bot.debug_text().endswith(", " + describe_territory(expected))
    hint, debug = shown["head"]
    assert "net territory: " in hint.split("Hint (values for black")[1]
    assert "net territory: " in debug
    hint, debug = shown["plain"]
    assert "net territory" not in hint and "net territory" not in debug


# ---------------------------------------------------------------------------------------------
# The main job with the head


@pytest.mark.slow
def test_a_short_run_with_the_head_trains_a_falling_ownership_loss(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["games_per_iteration=8", "selfplay.num_actors=2", "selfplay.games_in_parallel=4",
                 "selfplay.search.simulations=8", "selfplay.start_jitter_s=0", "min_steps=12",
                 "max_steps=12", "train_batch_size=64", "optim.warmup_steps=0", "eval.every=0",
                 "net.ownership_head=true"]
    assert main(["--preset", "cpu", "--run-dir", str(run_dir), "--iterations", "2",
                 "--no-progress", *overrides]) == 0
    losses = [json.loads(line)["train/ownership_loss"]
              for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and all(math.isfinite(loss) and loss > 0 for loss in losses)
    assert losses[1] < losses[0]
    chunks = [load_chunk(path) for path in sorted((run_dir / "replay").glob("chunk-*.npz"))]
    assert all(chunk.ownership_mask.any(axis=1).all() and (chunk.ownership_sign != 0).all()
               for chunk in chunks)
    assert load_model_for_play(run_dir / "models" / "model-0002.pt").config.ownership_head
