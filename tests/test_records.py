"""Tests of the game record format: exact round trips, errors that name file, line and game, and
the arena's `--record` files."""

from __future__ import annotations

import json

import oracle
import pytest
from conftest import oracle_game, random_games
from hypothesis import given
from hypothesis import strategies as st

from amazons import arena
from amazons.board import BLACK, WHITE, Board, Move
from amazons.players.records import (
    GameRecord,
    RecordError,
    parse_records,
    read_records,
    write_records,
)

STANDARD = {"Event", "Black", "White", "Date", "Result"}
header_keys = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True).filter(
    lambda key: key not in STANDARD)
# Any one-line text: quotes and backslashes are escaped, line breaks are refused.
header_values = st.text(max_size=20).filter(lambda value: "".join(value.splitlines()) == value)


@st.composite
def game_records(draw) -> GameRecord:
    """A record of a random game prefix (finished or not) with random header values."""
    _, moves = draw(random_games())
    extra = draw(st.dictionaries(header_keys, header_values, max_size=3))
    return GameRecord.from_game(
        [Move(*oracle.move_indices(move)) for move in moves],
        draw(header_values), draw(header_values),
        event=draw(header_values), date=draw(header_values), **extra)


@given(st.lists(game_records(), min_size=1, max_size=4))
def test_records_round_trip_exactly(records):
    text = "\n\n".join(record.to_text() for record in records) + "\n"
    parsed = parse_records(text, "games.txt")
    assert parsed == records
    assert [list(parsed_record.headers) for parsed_record in parsed] == [
        list(record.headers) for record in records]
    assert "\n\n".join(record.to_text() for record in parsed) + "\n" == text
    for record in parsed:
        assert record.winner == Board.from_moves(record.moves).winner()


def test_files_round_trip_and_appending_keeps_earlier_games(tmp_path):
    games = [[Move(*oracle.move_indices(move)) for move in oracle_game(seed)] for seed in range(3)]
    records = [GameRecord.from_game(moves, "a", "b", Note='say "hi" \\ bye') for moves in games]
    path = tmp_path / "sub" / "games.txt"
    write_records(path, records[:1])
    write_records(path, records[1:], append=True)
    assert read_records(path) == records
    assert '[Note "say \\"hi\\" \\\\ bye"]' in path.read_text()
    write_records(path, records[2:])  # without append the file is replaced
    assert read_records(path) == records[2:]
    write_records(path, [GameRecord([], {})])  # nothing to write: the file is left alone
    assert read_records(path) == records[2:]


def test_comments_crlf_and_extra_blank_lines_are_accepted():
    text = ('# a comment\r\n[Black "a"]\r\n2 0 2 2 3 1\r\n\r\n\r\n\r\n'
            '[Black "b"]\n# between moves\n2 0 2 2 3 1\n5 7 5 4 4 4\n')
    first, second = parse_records(text)
    assert first.black == "a"
    assert first.moves == [Move.parse("c8-c6/d7")]
    assert second.black == "b" and len(second.moves) == 2 and second.result == "*"
    headerless = parse_records("2 0 2 2 3 1\n")[0]
    assert headerless.headers == {} and headerless.white == "?" and headerless.winner is None


def test_a_header_after_moves_starts_a_new_game():
    records = parse_records('[Round "1"]\n2 0 2 2 3 1\n[Round "2"]\n2 0 2 2 3 1\n')
    assert [record.headers["Round"] for record in records] == ["1", "2"]
    assert all(len(record.moves) == 1 for record in records)
    # The second game starts from the start position, where White's reply cannot be played.
    with pytest.raises(RecordError, match=r"<text>:4: '5 7 5 4 4 4' \(game 2\): move 1: illegal"):
        parse_records('[Round "1"]\n2 0 2 2 3 1\n[Round "2"]\n5 7 5 4 4 4\n')


def _finished_game() -> list[Move]:
    return [Move(*oracle.move_indices(move)) for move in oracle_game(0)]


FINISHED = _finished_game()
FINISHED_LINES = [move.to_botzone() for move in FINISHED]
LOSER_WON = "0-1" if Board.from_moves(FINISHED).winner() == BLACK else "1-0"

# (file text, line number named, game number named, words of the message)
MALFORMED = [
    ('[Event "a"]\n2 0 2 2 3 1\n\n[Event "b]\n', 4, 2, "malformed header"),
    ('[Event "a\\q"]\n', 1, 1, "unknown escape"),
    ('[Event "a"]\n[Event "b"]\n', 2, 1, "duplicate header Event"),
    ('[Result "2-0"]\n', 1, 1, 'Result must be "1-0", "0-1" or "*"'),
    ("2 0 2 2 3 1\n5 7 5 4 4\n", 2, 1, "move 2: bad Botzone move"),
    ("2 0 2 2 3 1\n5 7 5 4 4 x\n", 2, 1, "'x' is not an integer"),
    ("2 0 2 9 3 1\n", 1, 1, "off the 8x8 board"),
    ("c8-c6/d7\n", 1, 1, "bad Botzone move"),
    ("\n\n2 0 2 2 3 1\n\n2 0 2 2 3 1\n2 0 2 3 3 1\n", 6, 2,
     "move 2: illegal move c8-c5/d7 for white"),
    ("\n".join(FINISHED_LINES + ["0 0 0 1 0 2"]), len(FINISHED) + 1, 1, "the game is over"),
    (f'[Result "{LOSER_WON}"]\n' + "\n".join(FINISHED_LINES), len(FINISHED) + 1, 1,
     f"Result is '{LOSER_WON}' but this move ends the game"),
]


@pytest.mark.parametrize(("text", "line", "game", "words"), MALFORMED)
def test_malformed_records_name_file_line_and_game(tmp_path, text, line, game, words):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(RecordError) as caught:
        read_records(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ")
    assert f"(game {game})" in message and words in message


def test_unreadable_text_and_unwritable_headers_are_explained(tmp_path):
    path = tmp_path / "binary.txt"
    path.write_bytes(b'[Event "\xff"]\n')
    with pytest.raises(RecordError, match="binary.txt: not a UTF-8 text file"):
        read_records(path)
    with pytest.raises(RecordError, match="line break"):
        GameRecord([], {"Event": "two\nlines"}).to_text()
    with pytest.raises(RecordError, match="header key 'Bad Key'"):
        GameRecord([], {"Bad Key": "x"}).to_text()


def test_arena_record_option_writes_the_match(tmp_path, capsys):
    record_path, json_path = tmp_path / "match.txt", tmp_path / "match.json"
    status = arena.main(["random", "greedy", "--games", "4", "--processes", "1", "--seed", "5",
                         "--record", str(record_path), "--json", str(json_path)])
    assert status == 0 and "4 games written" in capsys.readouterr().out
    result = json.loads(json_path.read_text())
    records = read_records(record_path)
    assert [record.headers["Round"] for record in records] == ["1", "2", "3", "4"]
    assert [record.black for record in records] == ["random", "greedy", "random", "greedy"]
    assert all(record.headers["Event"] == "arena" and record.headers["Opening"] == "4"
               for record in records)
    wins_a = sum(record.winner == (BLACK if record.black == "random" else WHITE)
                 for record in records)
    assert wins_a == result["wins_a"] and len(records) - wins_a == result["wins_b"]
    assert all(Board.from_moves(record.moves).is_game_over() for record in records)
    assert [game["moves"] for game in result["records"]] == [
        [move.to_botzone() for move in record.moves] for record in records]
