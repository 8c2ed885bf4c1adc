// Talking to the server: JSON requests whose errors carry the server's message, and websockets
// that reconnect after a dropped connection.

export class ApiError extends Error {
  constructor(message, status) {
    super(message);
    this.status = status;
  }
}

// `method` `url` with an optional JSON body; resolves to the decoded answer (null for 204),
// rejects with an ApiError holding the server's {"error": ...} message.
export async function request(method, url, body) {
  const options = { method, headers: {} };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, options);
  } catch (error) {
    throw new ApiError(`the server cannot be reached (${error.message})`, 0);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let value = null;
  try {
    value = text ? JSON.parse(text) : null;
  } catch {
    value = { error: text };
  }
  if (!response.ok) {
    throw new ApiError((value && value.error) || `${response.status} ${response.statusText}`,
                       response.status);
  }
  return value;
}

// A websocket on `path` (same host) that calls `onMessage(object)` for every message and
// reconnects after a second when the connection drops, until `close()` is called. A message
// {"type": "error"} from the server ends it for good (`onError(message)`).
export class LiveSocket {
  constructor(path, onMessage, { onError = () => {}, onStatus = () => {} } = {}) {
    this.path = path;
    this.onMessage = onMessage;
    this.onError = onError;
    this.onStatus = onStatus;
    this.closed = false;
    this.open();
  }

  open() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.socket = new WebSocket(`${scheme}//${location.host}${this.path}`);
    this.socket.onopen = () => this.onStatus("live");
    this.socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "error") {
        this.closed = true;
        this.onError(message.error);
        return;
      }
      this.onMessage(message);
    };
    this.socket.onclose = () => {
      if (this.closed) return;
      this.onStatus("reconnecting");
      setTimeout(() => { if (!this.closed) this.open(); }, 1000);
    };
  }

  close() {
    this.closed = true;
    this.socket.close();
  }
}

// Text helpers shared by the views.
export const COLORS = ["black", "white"];

// The side that plays ply `ply` (0 = the first move) on `board` (the server's board view: its
// `first` side moves first, Black on botzone8, White on standard10).
export function moverOf(board, ply) {
  return COLORS[(COLORS.indexOf(board ? board.first : "black") + ply) % 2];
}

export function capitalize(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

export function signed(value, digits = 2) {
  return `${value >= 0 ? "+" : "\u2212"}${Math.abs(value).toFixed(digits)}`;
}

export function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child);
  }
  return node;
}
