// What a browser has and node lacks, for the runtime's tests (test-only): Web Locks, the
// window's and the document's events, navigator.storage. Node has BroadcastChannel (it
// carries messages between instances in one process, as between tabs), EventTarget,
// CustomEvent (from 19; polyfilled below for 18), fetch and WebCrypto.

if (typeof globalThis.CustomEvent === "undefined") {
  globalThis.CustomEvent = class CustomEvent extends Event {
    constructor(type, options = {}) {
      super(type, options);
      this.detail = options.detail ?? null;
    }
  };
}

/** `navigator.locks`: exclusive locks granted in request order, released when the callback's promise settles. */
export class FakeLocks {
  constructor() {
    this.locks = new Map();
  }
  request(name, options, callback) {
    return new Promise((resolve, reject) => {
      const lock = this.locks.get(name) ?? { holder: null, queue: [] };
      this.locks.set(name, lock);
      const entry = { callback, resolve, reject };
      if (options.signal?.aborted) return reject(new DOMException("aborted", "AbortError"));
      options.signal?.addEventListener("abort", () => {
        const at = lock.queue.indexOf(entry);
        if (at >= 0) {
          lock.queue.splice(at, 1);
          reject(new DOMException("aborted", "AbortError"));
        }
      }, { once: true });
      lock.queue.push(entry);
      this.grant(name);
    });
  }
  grant(name) {
    const lock = this.locks.get(name);
    if (lock.holder || lock.queue.length === 0) return;
    const entry = lock.queue.shift();
    lock.holder = entry;
    const release = (settle) => (value) => {
      lock.holder = null;
      settle(value);
      this.grant(name);
    };
    Promise.resolve().then(() => entry.callback()).then(release(entry.resolve), release(entry.reject));
  }
  /** Who holds `name` (for assertions): true when held. */
  held(name) {
    return Boolean(this.locks.get(name)?.holder);
  }
}

function define(name, value) {
  Object.defineProperty(globalThis, name, { value, configurable: true, writable: true });
}

/**
 * Installs a window (globalThis as an EventTarget: `online`, `pagehide`, `pageshow`),
 * `navigator` with `locks` (and `storage.persist` answering `persist`), and a document;
 * returns them. `newDocument()` gives the next tab a document of its own (tabs read
 * `document` when they start).
 */
export function installBrowser({ persist = true } = {}) {
  const window = new EventTarget();
  define("addEventListener", window.addEventListener.bind(window));
  define("removeEventListener", window.removeEventListener.bind(window));
  define("dispatchEvent", window.dispatchEvent.bind(window));
  const locks = new FakeLocks();
  const storage = { persist: async () => { if (persist instanceof Error) throw persist; return persist; } };
  define("navigator", { locks, storage });
  const newDocument = () => {
    const document = new EventTarget();
    define("document", document);
    return document;
  };
  return { window, locks, document: newDocument(), newDocument };
}

/** Removes what installBrowser added. */
export function uninstallBrowser() {
  for (const name of ["addEventListener", "removeEventListener", "dispatchEvent", "navigator", "document"]) {
    try { delete globalThis[name]; } catch { /* not configurable */ }
  }
}

/** Resolves with the next `type` event of `target` (rejects after `ms`). */
export function nextEvent(target, type, ms = 10_000, accept = () => true) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { target.removeEventListener(type, on); reject(new Error(`no "${type}" event within ${ms} ms`)); }, ms);
    const on = (event) => {
      if (!accept(event)) return;
      clearTimeout(timer);
      target.removeEventListener(type, on);
      resolve(event);
    };
    target.addEventListener(type, on);
  });
}

/** Waits until `check()` is truthy (polling every 10 ms), or fails after `ms`. */
export async function eventually(check, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
