// The watch view: a training run's Elo and loss curves (from metrics.jsonl), its Elo ladder
// (elo.json) and its newest self-play games, updated live over a websocket.

import { LiveSocket, element } from "./api.js";
import { lineChart } from "./plot.js";
import { GameViewer, gamesTable } from "./replay.js";

const LOSS_KEYS = /^train\/(loss|.*_loss|value_mse)$/;

function series(metrics, key, name = key) {
  // The async pipeline logs an evaluation in a later iteration's line; eval/iteration names its model.
  const at = (row) => (key.startsWith("eval/") && "eval/iteration" in row ? row["eval/iteration"] : row.iteration);
  const points = metrics.filter((row) => key in row && "iteration" in row)
    .map((row) => [at(row), row[key]]);
  return { name, points };
}

export class WatchView {
  // `info`: the server's /api/info; its run_dir is the one run the server lets the page watch.
  constructor(info) {
    this.form = document.getElementById("watch-source");
    if (info.run_dir) this.form.elements.dir.value = info.run_dir;
    this.form.elements.dir.title = info.run_dir
      ? `the board's run directory (--run): ${info.run_dir}`
      : "start the board with --run RUN_DIR to watch a training run";
    this.status = document.getElementById("watch-status");
    this.follow = document.getElementById("watch-follow");
    this.viewer = new GameViewer(document.getElementById("watch-board"),
                                 document.getElementById("watch-controls"), { speed: "0.5" });
    this.viewer.onFinish = () => this.showNewest();
    this.socket = null;
    this.run = null;
    this.shownGame = null;
    this.connection = "";
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      const dir = this.form.elements.dir.value.trim();
      if (dir) this.watch(dir);
    });
    this.follow.addEventListener("change", () => { if (this.follow.checked) this.showNewest(true); });
  }

  watch(dir) {
    this.form.elements.dir.value = dir;
    if (this.socket) this.socket.close();
    this.run = null;
    this.shownGame = null;
    this.status.dataset.state = "loading";
    this.status.textContent = `Opening ${dir}\u2026`;
    this.socket = new LiveSocket(`/api/runs/ws?dir=${encodeURIComponent(dir)}`,
      (message) => this.update(message.run), {
        onError: (error) => {
          this.status.dataset.state = "error";
          this.status.textContent = error;
        },
        onStatus: (connection) => {
          this.connection = connection;
          if (this.run) this.renderStatus();
        },
      });
  }

  update(run) {
    this.run = run;
    this.renderStatus();
    const metrics = run.metrics;
    lineChart(document.getElementById("plot-elo"), [
      series(metrics, "eval/elo", "new model"),
      series(metrics, "eval/elo_greedy", "greedy"),
    ]);
    const lossKeys = [...new Set(metrics.flatMap((row) => Object.keys(row)))]
      .filter((key) => LOSS_KEYS.test(key)).sort();
    lineChart(document.getElementById("plot-loss"),
              lossKeys.map((key) => series(metrics, key, key.slice("train/".length))));
    this.renderLadder(run.ratings);
    const games = document.getElementById("watch-games");
    games.replaceChildren(gamesTable(run.games, (number) => this.pick(number), this.shownGame));
    if (this.follow.checked && !this.viewer.timer) this.showNewest();
  }

  renderStatus() {
    const run = this.run;
    const parts = [`${run.run_dir}`];
    if (run.preset) parts.push(`preset ${run.preset}`);
    if (run.iteration !== null && run.iteration !== undefined) {
      parts.push(`iteration ${run.iteration}${run.iterations ? ` of ${run.iterations}` : ""}`);
    }
    parts.push(`${run.games_total.toLocaleString()} self-play games`, `${run.models} models`);
    parts.push(this.connection === "reconnecting" ? "reconnecting\u2026"
               : `updated ${new Date().toLocaleTimeString()}`);
    this.status.dataset.state = "live";
    this.status.dataset.games = run.games_total;
    this.status.textContent = parts.join(" \u00b7 ");
  }

  renderLadder(ratings) {
    const table = document.getElementById("watch-ladder");
    if (!ratings) {
      table.replaceChildren(element("tr", {}, element("td", { text: "no evaluation yet" })));
      return;
    }
    const rows = Object.entries(ratings).sort((a, b) => b[1] - a[1]).map(([name, elo]) =>
      element("tr", {}, element("td", { text: name }), element("td", { class: "number", text: elo.toFixed(0) })));
    table.replaceChildren(element("tr", {}, element("th", { text: "player" }), element("th", { text: "Elo" })),
                          ...rows);
  }

  // Autoplay the newest game when following (unless it is the game shown, or `again`).
  showNewest(again = false) {
    if (!this.run || !this.run.games.length || !this.follow.checked) return;
    const newest = this.run.games[0];
    if (newest.game === this.shownGame && !again) return;
    this.shownGame = newest.game;
    this.viewer.show(newest);
    this.viewer.play();
  }

  pick(number) {
    const game = this.run.games.find((entry) => entry.game === number);
    if (!game) return;
    this.follow.checked = false;
    this.shownGame = number;
    this.viewer.show(game);
  }

  key(event) {
    this.viewer.key(event);
  }
}
