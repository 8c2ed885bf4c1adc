"""A throwaway Botzone bot for the arena's `botzone:` tests: random legal moves, pure Python.

Arguments are `key=value`: `keep=1` asks to keep running after each reply; `seed=N` seeds the
moves; `log=PATH` appends every input it reads (as JSON lines: `{"pid": .., "input": ..}`);
`fault=KIND` misbehaves on turn `at=N` (default 1; the turn is one more than the responses in
its first input, so without an opening it counts its own turns in both process modes):

* `sleep:S` sleeps S seconds of wall time, then replies; `burn` spins the CPU forever;
  `ponder` (keep-running) spins 1 s of CPU after asking to keep running;
* `crash` writes to stderr and exits with status 3; `silent` exits with status 0, no output;
  `exit-after` replies, then exits with status 5;
* `garbage` replies `hello world`; `illegal` replies `0 0 0 0 0 0`; `marker-first` prints the
  keep-running line first; `badjson` replies `{"response": "x"}`;
* `linger` replies, then sleeps without exiting or asking to keep running.

It reads line by line, as Botzone bots do: simple interaction (the turn number, `2n - 1` move
lines, then the data and globaldata lines) or one JSON line; blank lines and a lone turn number
before a keep-running request are skipped. Every reply saves `data` = `seen N` (N moves known).
"""

import json
import os
import random
import sys
import time

MARKER = ">>>BOTZONE_REQUEST_KEEP_RUNNING<<<"
KEYS = ("x0", "y0", "x1", "y1", "x2", "y2")
DIRECTIONS = [(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1) if dx or dy]


class Game:
    def __init__(self):
        self.grid = {}
        for square in ((0, 2), (2, 0), (5, 0), (7, 2)):
            self.grid[square] = 1
        for square in ((0, 5), (2, 7), (5, 7), (7, 5)):
            self.grid[square] = 2
        self.turn = 1
        self.plies = 0

    def reach(self, x, y):
        for dx, dy in DIRECTIONS:
            nx, ny = x + dx, y + dy
            while 0 <= nx < 8 and 0 <= ny < 8 and (nx, ny) not in self.grid:
                yield nx, ny
                nx, ny = nx + dx, ny + dy

    def moves(self):
        found = []
        for source in [square for square, owner in self.grid.items() if owner == self.turn]:
            del self.grid[source]
            for target in list(self.reach(*source)):
                for arrow in self.reach(*target):
                    found.append((*source, *target, *arrow))
            self.grid[source] = self.turn
        return sorted(found)

    def play(self, move):
        x0, y0, x1, y1, x2, y2 = move
        if move not in self.moves():
            raise SystemExit(f"test bot: illegal move {move} in its input")
        self.grid[(x1, y1)] = self.grid.pop((x0, y0))
        self.grid[(x2, y2)] = 3
        self.turn = 3 - self.turn
        self.plies += 1


def read_line(log, pid):
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"pid": pid, "input": line}) + "\n")
    return line


def parse_move(value):
    if isinstance(value, dict):
        value = [value[key] for key in KEYS]
    else:
        value = [int(token) for token in value.split()]
    return None if value[0] == -1 else tuple(value)


def main():
    options = dict(argument.split("=", 1) for argument in sys.argv[1:])
    keep = options.get("keep") == "1"
    fault, at = options.get("fault", ""), int(options.get("at", "1"))
    log, pid = options.get("log"), os.getpid()
    rng = random.Random(int(options.get("seed", "0")))
    first = read_line(log, pid)
    use_json = first.lstrip().startswith("{")
    if use_json:
        value = json.loads(first)
        requests = [parse_move(move) for move in value["requests"]]
        responses = [parse_move(move) for move in value["responses"]]
    else:
        count = int(first)
        lines = [read_line(log, pid) for _ in range(2 * count - 1)]
        requests = [parse_move(line) for line in lines[0::2]]
        responses = [parse_move(line) for line in lines[1::2]]
        read_line(log, pid), read_line(log, pid)  # the data and globaldata lines
    game = Game()
    for index, request in enumerate(requests):
        if request is not None:
            game.play(request)
        if index < len(responses):
            game.play(responses[index])
    turn = len(responses) + 1
    while True:
        print(f"test bot: turn {turn}, {game.plies} plies", file=sys.stderr, flush=True)
        kind = fault if turn == at else ""
        if kind.startswith("sleep:"):
            time.sleep(float(kind.split(":")[1]))
        if kind == "burn":
            while True:
                pass
        if kind == "crash":
            print("test bot: boom, crashing on purpose", file=sys.stderr, flush=True)
            sys.exit(3)
        if kind == "silent":
            sys.exit(0)
        if kind == "marker-first":
            print(MARKER, flush=True)
        move = rng.choice(game.moves())
        values = (0,) * 6 if kind == "illegal" else move
        if use_json:
            reply = {"response": dict(zip(KEYS, values, strict=True)), "debug": f"turn {turn}",
                     "data": f"seen {game.plies + 1}"}
            text = json.dumps(reply)
        else:
            text = (" ".join(str(value) for value in values)
                    + f"\nturn {turn}\nseen {game.plies + 1}")
        if kind in ("garbage", "badjson"):
            text = "hello world" if kind == "garbage" else '{"response": "x"}'
        print(text, flush=True)
        game.play(move)
        if kind == "exit-after":
            sys.exit(5)
        if kind == "linger":
            time.sleep(3600)
        if not keep:
            return
        print(MARKER, flush=True)
        if kind == "ponder":
            started = time.process_time()
            while time.process_time() - started < 1.0:
                pass
        while True:
            line = read_line(log, pid)
            tokens = line.split()
            if tokens and not (len(tokens) == 1 and tokens[0].isdigit()):
                break
        game.play(parse_move(json.loads(line) if use_json else line))
        turn += 1


if __name__ == "__main__":
    main()
