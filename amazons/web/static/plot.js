// Small SVG line charts for the watch view: series of (x, y) points, axes with round ticks,
// a legend, and each point's value as a tooltip.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 380;
const HEIGHT = 200;
const MARGIN = { left: 46, right: 12, top: 22, bottom: 30 };
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];

function svg(tag, attributes = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

// Round tick values covering [low, high]; with `integer`, whole steps only (iterations).
export function niceTicks(low, high, count = 5, integer = false) {
  if (!(high > low)) {
    const pad = integer ? 1 : Math.abs(low) * 0.1 || 1;
    return niceTicks(low - pad, high + pad, count, integer);
  }
  const raw = (high - low) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw);
  if (integer) step = Math.max(1, Math.round(step));
  const ticks = [];
  for (let value = Math.floor(low / step) * step; value <= high + step * 0.5; value += step) {
    ticks.push(Number(value.toFixed(10)));
    if (value >= high) break;
  }
  return ticks;
}

function format(value) {
  const size = Math.abs(value);
  if (size >= 1000) return value.toFixed(0);
  if (size >= 10) return value.toFixed(1).replace(/\.0$/, "");
  return Number(value.toPrecision(3)).toString();
}

// Draw `series` ([{name, points: [[x, y], ...]}]) into `container`.
export function lineChart(container, series, { xLabel = "iteration" } = {}) {
  const drawn = series.filter((entry) => entry.points.length);
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: "chart" });
  root.dataset.series = drawn.map((entry) => `${entry.name}:${entry.points.length}`).join(",");
  if (!drawn.length) {
    root.append(svg("text", { x: WIDTH / 2, y: HEIGHT / 2, class: "empty" }, "no data yet"));
    container.replaceChildren(root);
    return;
  }
  const xs = drawn.flatMap((entry) => entry.points.map((point) => point[0]));
  const ys = drawn.flatMap((entry) => entry.points.map((point) => point[1]));
  const xTicks = niceTicks(Math.min(...xs), Math.max(...xs), 6, true);
  const yTicks = niceTicks(Math.min(...ys), Math.max(...ys), 5);
  const [x0, x1] = [xTicks[0], xTicks[xTicks.length - 1]];
  const [y0, y1] = [yTicks[0], yTicks[yTicks.length - 1]];
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = HEIGHT - MARGIN.top - MARGIN.bottom;
  const px = (x) => MARGIN.left + ((x - x0) / (x1 - x0 || 1)) * plotWidth;
  const py = (y) => MARGIN.top + (1 - (y - y0) / (y1 - y0 || 1)) * plotHeight;

  const axes = svg("g", { class: "axes" });
  for (const tick of yTicks) {
    axes.append(svg("line", { x1: MARGIN.left, x2: WIDTH - MARGIN.right, y1: py(tick), y2: py(tick), class: "grid" }));
    axes.append(svg("text", { x: MARGIN.left - 5, y: py(tick) + 3, class: "y-tick" }, format(tick)));
  }
  for (const tick of xTicks) {
    axes.append(svg("text", { x: px(tick), y: HEIGHT - MARGIN.bottom + 13, class: "x-tick" }, format(tick)));
  }
  axes.append(svg("text", { x: MARGIN.left + plotWidth / 2, y: HEIGHT - 3, class: "x-label" }, xLabel));
  root.append(axes);

  drawn.forEach((entry, index) => {
    const color = PALETTE[index % PALETTE.length];
    const path = entry.points.map(([x, y]) => `${px(x).toFixed(1)},${py(y).toFixed(1)}`).join(" ");
    root.append(svg("polyline", { points: path, stroke: color, class: "line" }));
    for (const [x, y] of entry.points) {
      const dot = svg("circle", { cx: px(x), cy: py(y), r: 2.4, fill: color });
      dot.append(svg("title", {}, `${entry.name}: ${format(y)} at ${xLabel} ${format(x)}`));
      root.append(dot);
    }
    const legendX = MARGIN.left + 6 + index * 105;
    root.append(svg("rect", { x: legendX, y: 5, width: 10, height: 10, fill: color }));
    root.append(svg("text", { x: legendX + 14, y: 14, class: "legend" }, entry.name));
  });
  container.replaceChildren(root);
}
