import type { AttachmentProgress } from "./attachments.js";

/**
 * One syncing tab per replica (PROTOCOL.md has one writer per store; a browser has many
 * tabs). The tab that holds the Web Lock `deltasnap-sync:<db>` is the leader: it pushes
 * and pulls. It holds the lock until it closes (or `close()`), and the browser then hands
 * it to the next waiting tab — no timeout, no heartbeat, so a slow tab never loses it
 * while applying and a closed one never keeps it. A tab the browser freezes or puts in the
 * back/forward cache hands the lock over first (Page Lifecycle `freeze`, `pagehide`) and
 * queues for it again when it comes back. Every tab writes into the shared
 * IndexedDB queue itself (one transaction gives the write its number), and tells the
 * others over a BroadcastChannel, so the leader pushes it and the other tabs refresh.
 */
export type TabMessage =
  /** Data or status changed (a local write, an apply, a push answer): re-read. */
  | { type: "changed"; reason: "local-write" | "sync" | "push" }
  /** The records a transaction of that tab changed (`null`: any may have), for this tab's live queries. */
  | { type: "records"; ids: string[] | null }
  /** A follower wants a sync now (a user pressed "sync"). */
  | { type: "sync-request" }
  /** The leader's writes refused by the server, for every tab to show. */
  | { type: "refused"; writes: unknown[] }
  /** A tab took the lock. */
  | { type: "leader"; tab: string }
  /** The syncing tab's file transfer moved on (every tab can show the progress). */
  | { type: "attachment-progress"; progress: AttachmentProgress };

interface LockManagerLike {
  request(name: string, options: { mode: "exclusive"; signal?: AbortSignal }, callback: () => Promise<void>): Promise<void>;
}

export class TabCoordinator {
  readonly tabId = Math.random().toString(36).slice(2);
  isLeader = false;
  private channel: BroadcastChannel | null = null;
  private release: (() => void) | null = null;
  private waiting: AbortController | null = null;
  private closed = false;

  constructor(
    private readonly name: string,
    private readonly onLeader: () => void,
    private readonly onMessage: (message: TabMessage) => void,
    /**
     * The tab stops syncing: `freezing` when it is being frozen or put in the back/forward
     * cache (it will not run until resumed), false when it is being closed or unloaded.
     */
    private readonly onSuspend: (wasLeader: boolean, freezing: boolean) => void = () => undefined,
    /** The tab runs again after a suspension. */
    private readonly onResume: () => void = () => undefined,
  ) {}

  /** Joins the election (returns at once; `onLeader` runs when this tab gets the lock). */
  start(): void {
    if (typeof BroadcastChannel !== "undefined") {
      this.channel = new BroadcastChannel(`deltasnap:${this.name}`);
      this.channel.onmessage = (event) => this.onMessage(event.data as TabMessage);
    }
    // A tab the browser freezes (a background tab, a phone's tab switcher) or puts in the
    // back/forward cache cannot sync: it hands the lock over and queues again on return.
    const doc = (globalThis as { document?: Document }).document;
    doc?.addEventListener("freeze", this.freeze);
    doc?.addEventListener("resume", this.rejoin);
    globalThis.addEventListener?.("pagehide", this.pagehide);
    globalThis.addEventListener?.("pageshow", this.rejoin);
    this.join();
  }

  private join(): void {
    if (this.closed || this.isLeader || this.waiting) return;
    const locks = (globalThis as { navigator?: { locks?: LockManagerLike } }).navigator?.locks;
    if (!locks) {
      // No Web Locks (an old browser, a non-browser runtime): this tab syncs alone.
      this.becomeLeader();
      return;
    }
    const waiting = new AbortController();
    this.waiting = waiting;
    locks.request(`deltasnap-sync:${this.name}`, { mode: "exclusive", signal: waiting.signal }, () => {
      if (this.waiting === waiting) this.waiting = null;
      if (this.closed || waiting.signal.aborted) return Promise.resolve();
      this.becomeLeader();
      return new Promise<void>((resolve) => (this.release = resolve));
    }).catch(() => {
      if (this.waiting === waiting) this.waiting = null;  // aborted while waiting
    });
  }

  private becomeLeader(): void {
    this.isLeader = true;
    this.post({ type: "leader", tab: this.tabId });
    this.onLeader();
  }

  private readonly freeze = () => this.suspend(true);
  /** `persisted`: the page goes to the back/forward cache, else it is being unloaded. */
  private readonly pagehide = (event: Event) => this.suspend((event as PageTransitionEvent).persisted === true);

  /** Stops leading (or waiting to lead) until `rejoin`. */
  private suspend(freezing: boolean): void {
    this.waiting?.abort();
    this.waiting = null;
    const wasLeader = this.isLeader;
    this.isLeader = false;
    this.onSuspend(wasLeader, freezing);
    if (wasLeader) {
      this.release?.();
      this.release = null;
    }
  }

  private readonly rejoin = () => {
    if (this.closed) return;
    this.onResume();
    this.join();
  };

  post(message: TabMessage): void {
    try { this.channel?.postMessage(message); } catch { /* closed */ }
  }

  /** Leaves: the lock passes to the next tab waiting for it. */
  close(): void {
    this.suspend(false);
    this.closed = true;
    const doc = (globalThis as { document?: Document }).document;
    doc?.removeEventListener("freeze", this.freeze);
    doc?.removeEventListener("resume", this.rejoin);
    globalThis.removeEventListener?.("pagehide", this.pagehide);
    globalThis.removeEventListener?.("pageshow", this.rejoin);
    this.channel?.close();
  }
}
