/**
 * Live mode (PROTOCOL.md §11, CLIENT.md "Live mode"): instead of polling, a request waits on
 * the server (`GET /v1/index?wait=SECONDS`) until the index changes, then what changed is
 * pulled, and the next request waits again. The same loop as the Swift client's `LiveLoop`.
 */

/** How a replica or a view in live mode waits for changes. */
export interface LiveOptions {
  /** Seconds each request waits on the server for a change, 1–60. Default 30. */
  wait?: number;
  /** Seconds between plain polls, once held requests do not get through (a proxy cuts them). Default 30. */
  pollInterval?: number;
  /** The longest pause after failures in a row, in seconds (it doubles from one). Default 300. */
  maximumBackoff?: number;
}

/** What one round of live mode saw. */
export type LiveStep =
  /** The index changed and what it names was pulled. */
  | { kind: "changed" }
  /** The wait ended with no change. */
  | { kind: "unchanged" }
  /** Nothing may be sent before `until` (milliseconds since 1970; the server asked). */
  | { kind: "deferred"; until: number }
  | { kind: "failed" };

/**
 * The loop as a value: wait → pull → wait again, and the fallback when held requests fail.
 * A held request that fails after it was held a while was cut by something in between (a
 * proxy's read timeout): later waits are half as long as it lasted, down to plain polling
 * every `pollInterval`. One that fails at once (no server, an error answer) backs off,
 * doubling up to `maximumBackoff`.
 */
export class LiveLoop {
  /** Seconds the next request waits; `null`: a plain poll. */
  wait: number | null;
  private failures = 0;
  private readonly pollInterval: number;
  private readonly maximumBackoff: number;

  constructor(options: LiveOptions = {}) {
    this.wait = Math.min(60, Math.max(1, Math.floor(options.wait ?? 30)));
    this.pollInterval = options.pollInterval ?? 30;
    this.maximumBackoff = options.maximumBackoff ?? 300;
  }

  /** The pause in milliseconds before the next round, after `step`, which took `heldMs`. */
  pause(step: LiveStep, heldMs: number, now = Date.now()): number {
    switch (step.kind) {
      case "changed":
      case "unchanged":
        this.failures = 0;
        return this.wait === null ? this.pollInterval * 1000 : 0;
      case "deferred":
        return Math.max(0, step.until - now);
      case "failed": {
        this.failures += 1;
        if (this.wait !== null && heldMs >= 1000 && heldMs < this.wait * 1000) {
          const seconds = Math.floor(heldMs / 2000);
          this.wait = seconds >= 1 ? seconds : null;
          return 0;
        }
        return Math.min(1000 * 2 ** Math.min(this.failures - 1, 20), this.maximumBackoff * 1000);
      }
    }
  }

  /** Runs `step` (given the seconds to wait, or `null` for a plain poll) until `signal` aborts. */
  async run(step: (wait: number | null) => Promise<LiveStep>, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const started = Date.now();
      let outcome: LiveStep;
      try { outcome = await step(this.wait); } catch { outcome = { kind: "failed" }; }
      const pause = this.pause(outcome, Date.now() - started);
      if (pause > 0 && !signal.aborted) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, pause);
          signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
        });
      }
    }
  }
}
