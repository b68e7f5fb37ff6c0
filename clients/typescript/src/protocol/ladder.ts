/**
 * The fallback ladder (PROTOCOL.md §6 steps 2–4, §8.4 step 5) and the push answer table
 * (§6 step 7) as pure decisions, so they are tested without a network or a browser.
 */

/** Which request of a pull answered: the conditional one, or the validator-less full fetch. */
export type PullStep = "conditional" | "full";

/** What an answer to a pull request leads to. */
export type PullDecision =
  | { action: "not-modified" }
  | { action: "apply" }
  /** Keep the state held, count a failure and back off. `retryable`: trying later may help. */
  | { action: "keep"; retryable: boolean; unavailable: boolean; reason: string };

/** `null` status: no answer (network error, timeout). */
export function decidePullAnswer(step: PullStep, status: number | null): PullDecision {
  if (status === null) return { action: "keep", retryable: true, unavailable: true, reason: "no answer from the server" };
  if (status === 304 && step === "conditional") return { action: "not-modified" };
  if (status === 200) return { action: "apply" };
  const unavailable = isUnavailable(status);
  return { action: "keep", retryable: unavailable, unavailable, reason: `status ${status}` };
}

/**
 * A 200 whose body could not be applied (bad gzip or JSON, wrong base, count, checksum or
 * digest): after the conditional request one full fetch without validators; after that
 * full fetch, keep the state held — never loop, never empty the replica.
 */
export function decideAfterUnusableBody(step: PullStep): "full-fetch" | "keep" {
  return step === "conditional" ? "full-fetch" : "keep";
}

/** 408, 429 and 5xx: the server is out of reach or overloaded; trying later can help. */
export function isUnavailable(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** What the client does with a push answer (§6 step 7). */
export type PushDecision =
  /** Read the per-write results. */
  | "settle"
  /** Halve the batch and send again. */
  | "split"
  /** Keep the writes queued and retry later (backoff). */
  | "retry-later"
  /** The deletes of the batch are done, the other writes stay queued. */
  | "settle-deletes"
  /** Refuse every write of the batch: roll back and report. */
  | "refuse-all";

/** `errorCode` is the `error` of the server's JSON error body, `null` when there is none. */
export function decidePushAnswer(status: number | null, errorCode: string | null, batchSize: number): PushDecision {
  if (status === null) return "retry-later";
  if (status === 200) return "settle";
  if (batchSize > 1 && (status === 413 || (status === 400 && errorCode === "invalid_batch"))) return "split";
  if (status === 401 || isUnavailable(status)) return "retry-later";
  if (status === 404 || status === 410) return "settle-deletes";
  if (status >= 400 && status < 500) {
    // A proxy's page, a server setting or a broken transfer is not the writes' fault.
    if (errorCode === null || errorCode === "writes_disabled" || errorCode === "unreadable_body") return "retry-later";
    return "refuse-all";
  }
  return "retry-later";
}
