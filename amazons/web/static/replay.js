// Replaying recorded games: `GameViewer` steps, jumps and autoplays through one game (the
// server sends the board and its territory after every ply), `ReplayView` loads record files
// into it.

import { capitalize, element, moverOf, request } from "./api.js";
import { BoardView, moveArrows, territoryControl } from "./board.js";

const SPEEDS = [["0.1", "fast (0.1 s)"], ["0.5", "0.5 s a move"], ["1", "1 s a move"], ["2", "2 s a move"]];

export class GameViewer {
  // `boardElement`: where the board goes; `controls`: where the buttons, slider and move list go.
  // `onContinue(moves, side, board)`: "continue from here" (omitted: no such button).
  constructor(boardElement, controls, { onContinue = null, speed = "0.5" } = {}) {
    this.board = new BoardView(boardElement);
    this.board.draw({ squares: ".".repeat(64) });
    this.game = null;
    this.ply = 0;
    this.timer = null;
    this.onFinish = null;  // called when autoplay reaches the end
    const button = (label, title, action) => element("button", { type: "button", text: label, title, onclick: action });
    this.playButton = button("Play", "autoplay (space)", () => this.toggle());
    this.slider = element("input", { type: "range", min: 0, max: 0, value: 0, class: "ply-slider",
                                     oninput: () => this.go(Number(this.slider.value)) });
    this.speed = element("select", { class: "speed" },
      ...SPEEDS.map(([value, label]) => element("option", { value, text: label })));
    this.speed.value = speed;
    this.label = element("span", { class: "ply-label" });
    this.territory = territoryControl(() => this.go(this.ply));
    this.title = element("div", { class: "game-title" });
    this.headers = element("table", { class: "headers" });
    this.moves = element("ol", { class: "move-list" });
    const bar = element("div", { class: "buttons replay-buttons" },
      button("\u00ab Start", "the start position (Home)", () => this.go(0)),
      button("\u2039 Back", "back one ply (\u2190)", () => this.go(this.ply - 1)),
      this.playButton,
      button("Forward \u203a", "forward one ply (\u2192)", () => this.go(this.ply + 1)),
      button("End \u00bb", "the last position (End)", () => this.go(this.game ? this.game.plies : 0)),
      this.speed);
    const parts = [this.title, bar, element("div", { class: "slider-row" }, this.slider, this.label),
                   this.territory.root];
    if (onContinue) {
      parts.push(element("div", { class: "buttons" }, button("Play on from here against the AI",
        "start a game in the Play view from this position, you to move",
        () => onContinue(this.game.moves.slice(0, this.ply).map((move) => move.algebraic),
                         moverOf(this.game.board, this.ply), this.game.board))));
    }
    parts.push(this.headers, element("h2", { text: "Moves" }), this.moves);
    this.root = element("div", { class: "viewer", hidden: "" }, ...parts);
    controls.replaceChildren(this.root);
  }

  // Show `game` (a record view from the server) at `ply`.
  show(game, ply = 0) {
    this.stop();
    this.game = game;
    this.root.hidden = false;
    this.root.dataset.game = game.game;
    this.slider.max = game.plies;
    const board = game.board;
    const where = board.name === "botzone8" ? "" : `, on ${board.name || `${board.size}x${board.size}`}`;
    this.title.textContent = `Game ${game.game}: ${game.black} (Black) vs ${game.white} (White), ` +
      `${game.result}, ${game.plies} plies${where}`;
    this.root.dataset.board = board.label;
    this.headers.replaceChildren(...Object.entries(game.headers).map(([key, value]) =>
      element("tr", {}, element("th", { text: key }), element("td", { text: value }))));
    this.moves.replaceChildren(...game.moves.map((move, index) => element("li", {
      class: moverOf(game.board, index), text: move.algebraic, title: move.botzone,
      onclick: () => this.go(index + 1),
    })));
    this.go(ply);
  }

  go(ply) {
    if (!this.game) return;
    this.ply = Math.max(0, Math.min(ply, this.game.plies));
    const game = this.game;
    const marks = new Map();
    const arrows = [];
    if (this.ply > 0) {
      const last = game.moves[this.ply - 1].squares;
      for (const square of last) marks.set(square, "last");
      arrows.push(...moveArrows(last, "last"));
    }
    const territory = game.territories[this.ply];
    this.board.draw({ squares: game.boards[this.ply], marks, arrows,
                      territory: this.territory.box.checked ? territory.owner : null });
    this.territory.show(territory);
    this.board.root.dataset.ply = this.ply;
    this.root.dataset.ply = this.ply;
    this.slider.value = this.ply;
    let text = `ply ${this.ply} / ${game.plies}`;
    if (this.ply === game.plies) {
      text += game.over ? ` \u00b7 ${capitalize(moverOf(game.board, game.plies))} has no move: ${game.result}`
                        : ` \u00b7 end of the record (${game.result})`;
    } else {
      text += ` \u00b7 ${moverOf(game.board, this.ply)} to move`;
    }
    this.label.textContent = text;
    [...this.moves.children].forEach((item, index) => item.classList.toggle("current", index === this.ply - 1));
  }

  toggle() {
    if (this.timer) this.stop();
    else this.play();
  }

  play() {
    if (!this.game) return;
    if (this.ply >= this.game.plies) this.go(0);
    this.playButton.textContent = "Pause";
    this.root.dataset.playing = "true";
    const tick = () => {
      if (this.ply >= this.game.plies) {
        this.stop();
        if (this.onFinish) this.onFinish();
        return;
      }
      this.go(this.ply + 1);
      this.timer = setTimeout(tick, Number(this.speed.value) * 1000);
    };
    this.timer = setTimeout(tick, Number(this.speed.value) * 1000);
  }

  stop() {
    clearTimeout(this.timer);
    this.timer = null;
    this.playButton.textContent = "Play";
    this.root.dataset.playing = "false";
  }

  key(event) {
    const actions = {
      ArrowLeft: () => this.go(this.ply - 1), ArrowRight: () => this.go(this.ply + 1),
      Home: () => this.go(0), End: () => this.go(this.game.plies), " ": () => this.toggle(),
    };
    if (this.game && actions[event.key]) {
      event.preventDefault();
      actions[event.key]();
    }
  }
}

// A table of games; `onPick(number)` opens one.
export function gamesTable(games, onPick, current = null) {
  const head = element("tr", {}, ...["#", "Event", "Black", "White", "Result", "Plies"].map(
    (text) => element("th", { text })));
  const rows = games.map((game) => element("tr", {
    class: game.game === current ? "current" : "", "data-game": game.game,
    onclick: () => onPick(game.game),
  }, ...[game.game, game.headers.Event ?? "", game.black, game.white, game.result, game.plies].map(
    (text) => element("td", { text: String(text) }))));
  return element("table", {}, element("thead", {}, head), element("tbody", {}, ...rows));
}

export class ReplayView {
  // `info`: the server's /api/info, which names the record files it serves.
  constructor({ continueGame, info }) {
    this.form = document.getElementById("replay-source");
    // The server reads record files inside the folders it was started with, and its --replay.
    const served = [...(info.record_dirs || []).map((folder) => `inside ${folder}`),
                    ...(info.replay ? [info.replay] : [])];
    this.form.elements.path.title = served.length
      ? `a record file ${served.join(", ")}`
      : "start the board with --records DIR to name the record files in a folder";
    this.message = document.getElementById("replay-message");
    this.list = document.getElementById("replay-games");
    this.viewer = new GameViewer(document.getElementById("replay-board"),
                                 document.getElementById("replay-controls"),
                                 { onContinue: continueGame });
    this.source = null;  // {path} or {text}
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      const path = this.form.elements.path.value.trim();
      if (path) this.load({ path });
    });
    this.form.elements.upload.addEventListener("change", async () => {
      const file = this.form.elements.upload.files[0];
      if (file) this.load({ text: await file.text() }, file.name);
    });
  }

  async load(source, name = source.path) {
    this.message.dataset.state = "loading";
    this.message.textContent = `Reading ${name}\u2026`;
    if (source.path) this.form.elements.path.value = source.path;
    let answer;
    try {
      answer = await request("POST", "/api/records", source);
    } catch (error) {
      this.message.dataset.state = "error";
      this.message.textContent = error.message;
      return;
    }
    this.source = source;
    this.games = answer.games;
    this.message.dataset.state = "loaded";
    this.message.textContent = `${name}: ${answer.count} game${answer.count === 1 ? "" : "s"}.`;
    this.list.replaceChildren();
    if (answer.count > 1) this.list.append(gamesTable(answer.games, (number) => this.open(number)));
    if (answer.count >= 1) this.open(1);
  }

  async open(number) {
    try {
      const answer = await request("POST", "/api/records", { ...this.source, game: number });
      this.viewer.show(answer.game);
      for (const row of this.list.querySelectorAll("tr[data-game]")) {
        row.classList.toggle("current", Number(row.dataset.game) === number);
      }
    } catch (error) {
      this.message.dataset.state = "error";
      this.message.textContent = error.message;
    }
  }

  key(event) {
    this.viewer.key(event);
  }
}
