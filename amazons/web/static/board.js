// The board as SVG: N x N squares (square = y * N + x, the top left first: a8 on 8x8, a10 on
// 10x10), a territory tint, pieces, highlights and move arrows. It draws what it is given and
// reports clicks; it knows no rules. Its size is the size of what it draws (a string of N * N
// squares): a position of another size redraws the squares, coordinates and all.

import { element } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const FILES = "abcdefghij";

function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  return node;
}

// The side of a board of `count` squares (64 -> 8, 100 -> 10).
export function sizeOf(count) {
  return Math.round(Math.sqrt(count));
}

export function squareName(square, size = 8) {
  return `${FILES[square % size]}${size - Math.floor(square / size)}`;
}

// A move's algebraic name on a `size x size` board, e.g. "d1-d7/g7" on 10x10.
export function moveName(squares, size = 8) {
  const [src, dst, arrow] = squares.map((square) => squareName(square, size));
  return `${src}-${dst}/${arrow}`;
}

export class BoardView {
  // `container`: the element the SVG goes into; `onSquare(square)` is called on clicks.
  constructor(container, { onSquare = null, size = 8 } = {}) {
    this.container = container;
    this.onSquare = onSquare;
    this.build(size);
  }

  // (Re)make the SVG for a `size x size` board.
  build(size) {
    this.size = size;
    const onSquare = this.onSquare;
    const extent = size + 0.5;
    this.root = svg("svg", { viewBox: `-0.42 -0.06 ${extent} ${extent}`, class: "board-svg", role: "img" });
    this.root.dataset.size = size;
    this.squares = [];
    const squareLayer = svg("g");
    for (let square = 0; square < size * size; square++) {
      const x = square % size;
      const y = Math.floor(square / size);
      const group = svg("g", {
        class: `sq ${(x + y) % 2 ? "dark" : "light"}`,
        "data-square": square,
        "data-name": squareName(square, size),
      });
      group.append(svg("rect", { class: "base", x, y, width: 1, height: 1 }));
      group.append(svg("rect", { class: "tint", x, y, width: 1, height: 1 }));
      group.append(svg("rect", { class: "mark", x: x + 0.03, y: y + 0.03, width: 0.94, height: 0.94 }));
      group.append(svg("circle", { class: "target", cx: x + 0.5, cy: y + 0.5, r: 0.14 }));
      const piece = svg("g", { class: "piece", transform: `translate(${x + 0.5} ${y + 0.5})` });
      group.append(piece);
      if (onSquare) group.addEventListener("click", () => this.onSquare(square));
      squareLayer.append(group);
      this.squares.push({ group, piece, content: "" });
    }
    const labels = svg("g", { class: "coords" });
    for (let i = 0; i < size; i++) {
      const file = svg("text", { x: i + 0.5, y: size + 0.3 });
      file.textContent = FILES[i];
      const rank = svg("text", { x: -0.21, y: i + 0.58 });
      rank.textContent = String(size - i);
      labels.append(file, rank);
    }
    this.arrowLayer = svg("g", { class: "move-arrows" });
    const defs = svg("defs");
    for (const kind of ["hint", "last", "pv"]) {
      const marker = svg("marker", {
        id: `head-${kind}-${BoardView.count = (BoardView.count || 0) + 1}`,
        viewBox: "0 0 10 10", refX: 5, refY: 5, markerWidth: 3.2, markerHeight: 3.2,
        orient: "auto-start-reverse", class: `head ${kind}`,
      });
      marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
      defs.append(marker);
      this[`marker_${kind}`] = marker.id;
    }
    this.root.append(defs, squareLayer, labels, this.arrowLayer);
    this.container.replaceChildren(this.root);
  }

  centre(square) {
    return [(square % this.size) + 0.5, Math.floor(square / this.size) + 0.5];
  }

  // Draw a position: `squares` is N * N characters (B, W, x, .); its length sets the size.
  // `marks`: Map square -> class names for highlights (legal targets, selection, last move).
  // `arrows`: [{from, to, kind, shot}] lines drawn over the board (kind: hint, last or pv;
  // `shot`: an arrow's flight, drawn dashed).
  // `territory`: the server's N * N ownership values (+1 Black's, -1 White's, 0 nobody's), each
  // square tinted in its owner's colour; null draws no tint.
  draw({ squares, marks = new Map(), arrows = [], territory = null }) {
    const size = sizeOf(squares.length);
    if (size !== this.size) this.build(size);
    this.root.dataset.squares = squares;
    this.root.dataset.territory = territory ? "on" : "off";
    for (let square = 0; square < size * size; square++) {
      const entry = this.squares[square];
      const content = squares[square];
      if (entry.content !== content) {
        entry.content = content;
        entry.piece.replaceChildren(...pieceShapes(content));
      }
      const classes = ["sq", (square % size + Math.floor(square / size)) % 2 ? "dark" : "light"];
      if (content === "B") classes.push("black-amazon");
      if (content === "W") classes.push("white-amazon");
      if (content === "x") classes.push("arrow");
      if (territory && territory[square] > 0) classes.push("own-black");
      if (territory && territory[square] < 0) classes.push("own-white");
      if (marks.has(square)) classes.push(marks.get(square));
      entry.group.setAttribute("class", classes.join(" "));
    }
    this.arrowLayer.replaceChildren();
    for (const { from, to, kind, shot = false } of arrows) {
      const [x1, y1] = this.centre(from);
      const [x2, y2] = this.centre(to);
      const length = Math.hypot(x2 - x1, y2 - y1) || 1;
      const shorten = 0.28 / length;
      this.arrowLayer.append(svg("line", {
        x1, y1, x2: x2 - (x2 - x1) * shorten, y2: y2 - (y2 - y1) * shorten,
        class: `move-arrow ${kind}${shot ? " shot" : ""}`, "marker-end": `url(#${this[`marker_${kind}`]})`,
      }));
    }
  }
}

// The territory line beside a board: the squares each side owns and who is ahead by how many.
export function territoryText(territory) {
  const { black, white, balance } = territory;
  const lead = balance === 0 ? "even"
    : `${balance > 0 ? "Black" : "White"} ahead by ${Math.abs(balance)}`;
  return `Black ${black} \u00b7 White ${white} squares: ${lead}`;
}

// A territory toggle: a checkbox (ticked at first) and the balance beside it, in `root`.
// `onChange()` is called when the box is ticked or cleared; `show(territory)` writes the balance.
export function territoryControl(onChange) {
  const box = element("input", { type: "checkbox", class: "territory-toggle", checked: "", onchange: onChange });
  const label = element("label", {
    class: "toggle",
    title: "tint each square in the colour of the side whose nearest amazon reaches it in fewer " +
      "queen moves (ties and walled-off squares stay untinted)",
  }, box, " territory");
  const balance = element("span", { class: "territory-balance" });
  return {
    root: element("div", { class: "territory-row" }, label, balance),
    box,
    show(territory) {
      balance.textContent = territory ? territoryText(territory) : "";
      balance.dataset.balance = territory ? territory.balance : "";
    },
  };
}

// A move's two lines: the amazon's path and its arrow's flight.
export function moveArrows(squares, kind) {
  const [src, dst, arrow] = squares;
  return [{ from: src, to: dst, kind }, { from: dst, to: arrow, kind, shot: true }];
}

function pieceShapes(content) {
  if (content === "B" || content === "W") {
    const body = svg("circle", { r: 0.36, class: "amazon-body" });
    const crown = svg("path", {
      class: "amazon-crown",
      d: "M -0.2 0.1 L -0.22 -0.14 L -0.11 -0.03 L 0 -0.2 L 0.11 -0.03 L 0.22 -0.14 L 0.2 0.1 Z",
    });
    const band = svg("rect", { class: "amazon-crown", x: -0.2, y: 0.13, width: 0.4, height: 0.07 });
    return [body, crown, band];
  }
  if (content === "x") {
    return [
      svg("rect", { class: "arrow-block", x: -0.42, y: -0.42, width: 0.84, height: 0.84, rx: 0.06 }),
      svg("path", { class: "arrow-cross", d: "M -0.2 -0.2 L 0.2 0.2 M 0.2 -0.2 L -0.2 0.2" }),
    ];
  }
  return [];
}
