// The run's websocket: reconnects with capped, jittered exponential backoff, and tells the
// page each time it opens so the page can backfill what it missed from the REST API.

const CLOSE_UNAUTHENTICATED = 4401;
const CLOSE_NOT_FOUND = 4404;
const FIRST_DELAY_MS = 500;
const MAX_DELAY_MS = 15000;

export class LiveSocket {
  constructor(path, { onOpen, onEvent, onStatus, onRefused }) {
    this.url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`;
    this.handlers = { onOpen, onEvent, onStatus, onRefused };
    this.attempt = 0;
    this.stopped = false;
    this.socket = null;
    this.timer = null;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    if (this.socket) this.socket.close(1000, "page done");
  }

  connect() {
    this.handlers.onStatus("connecting");
    const socket = (this.socket = new WebSocket(this.url));
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this.attempt = 0;
      this.handlers.onStatus("live");
      this.handlers.onOpen();
    };
    socket.onmessage = (message) => {
      const received = Date.now();
      this.handlers.onEvent(JSON.parse(message.data), received);
    };
    socket.onclose = (event) => {
      if (socket !== this.socket || this.stopped) return;
      if (event.code === CLOSE_UNAUTHENTICATED || event.code === CLOSE_NOT_FOUND) {
        this.stopped = true;
        this.handlers.onRefused(event.code === CLOSE_UNAUTHENTICATED ? "signed-out" : "not-found");
        return;
      }
      if (opened) this.attempt = 0;
      const delay = Math.min(MAX_DELAY_MS, FIRST_DELAY_MS * 2 ** this.attempt) * (0.5 + Math.random() / 2);
      this.attempt += 1;
      this.handlers.onStatus("reconnecting", delay);
      this.timer = setTimeout(() => this.connect(), delay);
    };
  }
}
