// The Play view: a game against the AI (or an analysis board), moves by clicks, the analysis
// panel, the evaluation bar and the territory overlay. The server sends the legal moves as
// {src: {dst: [arrows]}}; the clicks walk that tree: an amazon, one of its destinations, one of
// the arrow squares. It sends the territory too, so the overlay needs no rules either.

import { COLORS, LiveSocket, capitalize, element, moverOf, request, signed } from "./api.js";
import { BoardView, moveArrows, moveName, territoryControl } from "./board.js";

export class PlayView {
  constructor(info) {
    this.board = new BoardView(document.getElementById("play-board"),
                               { onSquare: (square) => this.click(square) });
    this.form = document.getElementById("new-game");
    this.status = document.getElementById("play-status");
    this.evalBar = document.getElementById("play-eval");
    this.analysisPanel = document.getElementById("analysis");
    this.movesList = document.getElementById("play-moves");
    this.saved = document.getElementById("play-saved");
    this.decided = document.getElementById("play-decided");
    this.undoButton = document.getElementById("undo-button");
    this.analyseButton = document.getElementById("analyse-button");
    this.recordLink = document.getElementById("record-link");
    this.territory = territoryControl(() => this.render());
    document.getElementById("play-territory").replaceChildren(this.territory.root);
    this.state = null;
    this.socket = null;
    this.selection = [];  // [] or [src] or [src, dst]
    this.pending = false;  // a move or an undo is on its way to the server
    this.message = "";  // the last refused request, shown under the status
    this.shownMove = null;  // squares of the analysis row under the pointer

    this.form.elements.time.value = info.time_per_move;
    const model = this.form.elements.model;
    if ([...model.options].some((option) => option.value === info.model && info.model !== "path")) {
      model.value = info.model;
    } else {
      model.value = "path";
      this.form.elements.path.value = info.model;
    }
    // The server loads model files from its --model, --models and --run folders only.
    const folders = info.model_dirs || [];
    this.form.elements.path.title = folders.length
      ? `a model file inside ${folders.join(", ")} (or the board's --model)`
      : "the board's --model (start it with --models DIR to serve a folder's files)";
    const showPath = () => { this.form.querySelector(".model-path").hidden = model.value !== "path"; };
    model.addEventListener("change", showPath);
    showPath();
    // The board: a named start, or a start position string of any size 6..10.
    const board = this.form.elements.board;
    this.showPosition = () => {
      this.form.querySelector(".board-position").hidden = board.value !== "position";
    };
    board.addEventListener("change", this.showPosition);
    this.selectBoard(info.board || "botzone8");
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.start();
    });
    this.undoButton.addEventListener("click", () => this.undo());
    this.analyseButton.addEventListener("click", () => this.analyse());
    this.board.draw({ squares: ".".repeat(64) });
    this.start();
  }

  // Show `label` (a named board or a start position string) in the form's board fields.
  selectBoard(label) {
    const elements = this.form.elements;
    const named = [...elements.board.options].some((option) => option.value === label && label !== "position");
    elements.board.value = named ? label : "position";
    if (!named) elements.position.value = label;
    this.showPosition();
  }

  settings() {
    const elements = this.form.elements;
    const model = elements.model.value === "path" ? elements.path.value.trim() : elements.model.value;
    const board = elements.board.value === "position" ? elements.position.value.trim() : elements.board.value;
    return { side: elements.side.value, model, time: Number(elements.time.value), board };
  }

  // A new game with the form's settings; `extra` may set `moves` (continue from them), `side`
  // and `board` (a board's name or start position string).
  async start(extra = {}) {
    if (extra.board) this.selectBoard(extra.board);
    const body = { ...this.settings(), ...extra };
    if (extra.side) this.form.elements.side.value = extra.side;
    this.setStatus("loading", "Starting a game\u2026");
    let state;
    try {
      state = await request("POST", "/api/games", body);
    } catch (error) {
      this.setStatus("error", `Cannot start the game: ${error.message}`);
      return;
    }
    if (this.socket) this.socket.close();
    this.state = null;
    this.selection = [];
    this.message = "";
    this.accept(state);
    this.socket = new LiveSocket(`/api/games/${state.id}/ws`, (message) => this.accept(message.state), {
      onError: (error) => { this.message = error; this.render(); },
    });
  }

  // Take a state from an answer or the websocket unless a newer one of the same game is shown.
  accept(state) {
    if (this.state && (state.id !== this.state.id || state.version < this.state.version)) return;
    this.state = state;
    if (!state.legal) this.selection = [];
    this.render();
  }

  click(square) {
    const state = this.state;
    if (!state || !state.legal || this.pending) return;
    const legal = state.legal;
    const [src, dst] = this.selection;
    if (this.selection.length === 2) {
      if (legal[src][dst].includes(square)) {
        this.submit([src, dst, square]);
        return;
      }
      this.selection = legal[square] && square !== src ? [square] : [src];
    } else if (this.selection.length === 1) {
      if (square === src) this.selection = [];
      else if (legal[src][square]) this.selection = [src, square];
      else if (legal[square]) this.selection = [square];
      else this.selection = [];
    } else if (legal[square]) {
      this.selection = [square];
    }
    this.render();
  }

  async submit(squares) {
    const move = moveName(squares, this.state.board.size);
    this.pending = true;
    this.selection = [];
    this.message = "";
    try {
      this.accept(await request("POST", `/api/games/${this.state.id}/move`, { move }));
    } catch (error) {
      this.message = `${move}: ${error.message}`;
    } finally {
      this.pending = false;
      this.render();
    }
  }

  async undo() {
    this.pending = true;
    this.message = "";
    try {
      this.accept(await request("POST", `/api/games/${this.state.id}/undo`));
    } catch (error) {
      this.message = error.message;
    } finally {
      this.pending = false;
      this.render();
    }
  }

  async analyse() {
    this.message = "";
    try {
      await request("POST", `/api/games/${this.state.id}/analyse`, {});
    } catch (error) {
      this.message = error.message;
      this.render();
    }
  }

  setStatus(kind, text) {
    this.status.dataset.state = kind;
    this.status.textContent = text;
  }

  render() {
    const state = this.state;
    if (!state) return;
    this.renderStatus(state);
    this.renderBoard(state);
    this.renderAnalysis(state.analysis, state);
    this.renderMoves(state);
    this.renderDecided(state.decided);
    const humanMoved = state.moves.some((_, ply) => state.human.includes(moverOf(state.board, ply)));
    this.undoButton.disabled = Boolean(state.busy) || this.pending || !humanMoved;
    this.analyseButton.disabled = Boolean(state.busy) || state.over;
    this.recordLink.hidden = false;
    this.recordLink.href = `/api/games/${state.id}/record`;
    this.recordLink.setAttribute("download", `amazons-${state.id}.txt`);
    this.saved.dataset.plies = state.saved_plies ?? "";
    this.saved.textContent = state.saved
      ? (state.saved_plies ? `Saved to ${state.saved} (${state.saved_plies} plies).`
                           : `Will be saved to ${state.saved}.`)
      : "Not saved (the server runs with --no-save); the Record link downloads the game.";
  }

  renderStatus(state) {
    let kind;
    let text;
    const mover = capitalize(state.turn);
    if (state.over) {
      kind = "over";
      const winner = capitalize(state.winner);
      const loser = state.winner === "black" ? "White" : "Black";
      const you = state.human.length === 1
        ? (state.human[0] === state.winner ? " You win!" : " The AI wins.") : "";
      text = `Game over: ${winner} wins (${state.result}): ${loser} has no legal move.${you}`;
    } else if (state.busy === "thinking") {
      kind = "thinking";
      text = `The AI (${state.turn}) is thinking\u2026`;
    } else if (state.busy === "analysing") {
      kind = "analysing";
      text = `Analysing (${state.turn} to move)\u2026`;
    } else if (state.human.includes(state.turn)) {
      kind = "your-move";
      const step = ["Click an amazon.", "Click its destination.", "Click the arrow's square."][this.selection.length];
      text = `${mover} to move (you). ${step}`;
    } else {
      kind = "waiting";
      text = `${mover} to move (the AI).`;
    }
    this.setStatus(kind, text);
    this.status.dataset.ply = state.ply;
    const problem = this.message || state.error;
    if (problem) this.status.append(element("div", { class: "error", text: problem }));
  }

  renderBoard(state) {
    let squares = state.squares;
    const marks = new Map();
    const arrows = [];
    const legal = state.legal;
    const [src, dst] = this.selection;
    const last = state.moves.length ? state.moves[state.moves.length - 1].squares : null;
    if (last && this.selection.length === 0) {
      for (const square of last) marks.set(square, "last");
    }
    if (legal && this.selection.length === 0) {
      for (const square of Object.keys(legal)) marks.set(Number(square), "legal-src");
    } else if (legal && this.selection.length === 1) {
      for (const square of Object.keys(legal)) marks.set(Number(square), "legal-src");
      for (const square of Object.keys(legal[src])) marks.set(Number(square), "legal-dst");
      marks.set(src, "selected");
    } else if (legal && this.selection.length === 2) {
      const piece = squares[src];
      const cells = squares.split("");
      cells[src] = ".";
      cells[dst] = piece;
      squares = cells.join("");  // the amazon already stands on its destination
      for (const square of legal[src][dst]) marks.set(square, "legal-arrow");
      marks.set(dst, "selected");
    }
    const analysis = state.analysis;
    if (this.shownMove) {
      arrows.push(...moveArrows(this.shownMove, "pv"));
    } else if (analysis && analysis.ply === state.ply && analysis.top.length && !state.over
               && this.selection.length === 0) {
      arrows.push(...moveArrows(analysis.top[0].squares, "hint"));
    }
    const territory = this.territory.box.checked ? state.territory.owner : null;
    this.board.draw({ squares, marks, arrows, territory });
    this.territory.show(state.territory);
    this.board.root.dataset.ply = state.ply;
    this.board.root.dataset.board = state.board.label;
    this.renderEval(analysis);
  }

  renderEval(analysis) {
    const fill = this.evalBar.querySelector(".eval-black");
    const label = this.evalBar.querySelector(".eval-label");
    if (!analysis) {
      fill.style.height = "50%";
      label.textContent = "";
      this.evalBar.dataset.value = "";
      return;
    }
    const proven = analysis.proven !== 0;
    const black = proven ? (analysis.winner === "black" ? 1 : -1) : analysis.black_value;
    fill.style.height = `${((1 + black) / 2) * 100}%`;
    label.textContent = proven ? (black > 0 ? "1-0" : "0-1") : signed(black);
    this.evalBar.dataset.value = black;
    this.evalBar.title = proven
      ? `${analysis.winner} wins: proven by the search at ply ${analysis.ply}`
      : `value ${signed(black)} for Black (search at ply ${analysis.ply})`;
  }

  renderAnalysis(analysis, state) {
    const panel = this.analysisPanel;
    panel.hidden = !analysis;
    if (!analysis) return;
    const about = analysis.kind === "ai-move"
      ? `(the AI's search for ply ${analysis.ply + 1})`
      : `(the position at ply ${analysis.ply})`;
    panel.querySelector(".analysis-about").textContent = about;
    const verdict = analysis.proven
      ? `proven ${analysis.proven > 0 ? "win" : "loss"} for ${analysis.turn} in ${analysis.proof_plies} plies`
      : `value ${signed(analysis.value)} for ${analysis.turn}`;
    panel.querySelector(".analysis-summary").textContent =
      `${capitalize(analysis.turn)} to move: ${verdict} ` +
      `\u00b7 ${analysis.simulations.toLocaleString()} simulations in ${analysis.seconds.toFixed(2)} s ` +
      `\u00b7 ${analysis.legal_moves.toLocaleString()} legal moves`;
    const rows = analysis.top.map((entry) => {
      const bar = element("span", { class: "share-bar" });
      bar.style.width = `${Math.round(entry.share * 100)}%`;
      const row = element("tr", {},
        element("td", { class: "move", text: entry.algebraic, title: entry.botzone }),
        element("td", { text: entry.visits.toLocaleString() }),
        element("td", { class: "share" }, bar, element("span", { text: `${(entry.share * 100).toFixed(1)}%` })),
        element("td", { text: entry.proof ? `${entry.proof > 0 ? "win" : "loss"} in ${entry.proof_plies}`
                                          : entry.q === null ? "\u2013" : signed(entry.q, 3) }),
        element("td", { text: `${(entry.prior * 100).toFixed(1)}%` }));
      row.addEventListener("mouseenter", () => {
        if (analysis.ply !== this.state.ply) return;
        this.shownMove = entry.squares;
        this.renderBoard(this.state);
      });
      row.addEventListener("mouseleave", () => {
        this.shownMove = null;
        this.renderBoard(this.state);
      });
      return row;
    });
    panel.querySelector(".top-moves tbody").replaceChildren(...rows);
    const line = analysis.pv.map((move, index) => `${analysis.ply + index + 1}. ${move.algebraic}`);
    panel.querySelector(".pv").textContent = line.length ? `Principal variation: ${line.join("  ")}` : "";
  }

  // The server's text: the engine's adjudication of a separated position, or a search's proof.
  renderDecided(decided) {
    this.decided.hidden = !decided;
    this.decided.dataset.winner = decided ? decided.winner : "";
    this.decided.dataset.by = decided ? decided.by : "";
    if (!decided) return;
    this.decided.textContent = `${capitalize(decided.text)}.`;
    this.decided.title = decided.by === "adjudication"
      ? `the amazons are separated: the game ends within ${decided.plies_bound} plies`
      : "every line was searched to the end";
  }

  renderMoves(state) {
    const items = state.moves.map((move, ply) => element("li", {
      class: `${moverOf(state.board, ply)}${ply < state.opening ? " opening" : ""}`,
      text: move.algebraic, title: `${moverOf(state.board, ply)}: ${move.botzone}`,
    }));
    this.movesList.replaceChildren(...items);
    this.movesList.dataset.count = state.moves.length;
  }
}
