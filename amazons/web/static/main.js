// The page: three views behind tabs (#play, #replay, #watch), each with its own controller.

import { request } from "./api.js";
import { PlayView } from "./play.js";
import { ReplayView } from "./replay.js";
import { WatchView } from "./watch.js";

const VIEWS = ["play", "replay", "watch"];

function show(name) {
  const view = VIEWS.includes(name) ? name : "play";
  for (const other of VIEWS) {
    document.getElementById(`${other}-view`).hidden = other !== view;
  }
  for (const link of document.querySelectorAll("#tabs a")) {
    link.classList.toggle("active", link.dataset.view === view);
  }
  document.body.dataset.view = view;
}

async function start() {
  const info = await request("GET", "/api/info");
  document.getElementById("server-info").textContent =
    `amazons ${info.version} \u00b7 games saved to ${info.games_dir ?? "nowhere (--no-save)"}`;
  const play = new PlayView(info);
  const replay = new ReplayView({
    continueGame: (moves, side, board) => {
      play.start({ moves, side, board: board.label });
      location.hash = "#play";
    },
    info,
  });
  const watch = new WatchView(info);
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, select, textarea")) return;
    if (document.body.dataset.view === "replay") replay.key(event);
    if (document.body.dataset.view === "watch") watch.key(event);
  });
  if (info.replay) {
    replay.load({ path: info.replay });
    if (!location.hash) location.hash = "#replay";
  }
  if (info.run_dir) {
    watch.watch(info.run_dir);
    if (!location.hash) location.hash = "#watch";
  }
  show(location.hash.slice(1));
  document.body.dataset.ready = "true";
}

start().catch((error) => {
  document.getElementById("server-info").textContent = `cannot start: ${error.message}`;
});
