/**
 * One syncing tab per replica (PROTOCOL.md has one writer per store; a browser has many
 * tabs). The tab that holds the Web Lock `deltasnap-sync:<db>` is the leader: it pushes
 * and pulls. It holds the lock until it closes (or `close()`), and the browser then hands
 * it to the next waiting tab — no timeout, no heartbeat, so a slow tab never loses it
 * while applying and a closed one never keeps it. Every tab writes into the shared
 * IndexedDB queue itself (one transaction gives the write its number), and tells the
 * others over a BroadcastChannel, so the leader pushes it and the other tabs refresh.
 */
export type TabMessage =
  /** Data or status changed (a local write, an apply, a push answer): re-read. */
  | { type: "changed"; reason: "local-write" | "sync" | "push" }
  /** A follower wants a sync now (a user pressed "sync"). */
  | { type: "sync-request" }
  /** The leader's writes refused by the server, for every tab to show. */
  | { type: "refused"; writes: unknown[] }
  /** A tab took the lock. */
  | { type: "leader"; tab: string };

interface LockManagerLike {
  request(name: string, options: { mode: "exclusive" }, callback: () => Promise<void>): Promise<void>;
}

export class TabCoordinator {
  readonly tabId = Math.random().toString(36).slice(2);
  isLeader = false;
  private channel: BroadcastChannel | null = null;
  private release: (() => void) | null = null;
  private closed = false;

  constructor(private readonly name: string, private readonly onLeader: () => void, private readonly onMessage: (message: TabMessage) => void) {}

  /** Joins the election (resolves at once; `onLeader` runs when this tab gets the lock). */
  start(): void {
    if (typeof BroadcastChannel !== "undefined") {
      this.channel = new BroadcastChannel(`deltasnap:${this.name}`);
      this.channel.onmessage = (event) => this.onMessage(event.data as TabMessage);
    }
    const locks = (globalThis as { navigator?: { locks?: LockManagerLike } }).navigator?.locks;
    if (!locks) {
      // No Web Locks (an old browser, a non-browser runtime): this tab syncs alone.
      this.becomeLeader();
      return;
    }
    locks.request(`deltasnap-sync:${this.name}`, { mode: "exclusive" }, () => {
      if (this.closed) return Promise.resolve();
      this.becomeLeader();
      return new Promise<void>((resolve) => (this.release = resolve));
    }).catch(() => undefined);
  }

  private becomeLeader(): void {
    this.isLeader = true;
    this.post({ type: "leader", tab: this.tabId });
    this.onLeader();
  }

  post(message: TabMessage): void {
    try { this.channel?.postMessage(message); } catch { /* closed */ }
  }

  /** Leaves: the lock passes to the next tab waiting for it. */
  close(): void {
    this.closed = true;
    this.isLeader = false;
    this.release?.();
    this.channel?.close();
  }
}
