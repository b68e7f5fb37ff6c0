/**
 * When to try again after a failure: exponential backoff with jitter, never sooner than
 * the server's `Retry-After`/`Backoff` (PROTOCOL.md §6 step 4). The same numbers as the
 * Swift client's `RetryPolicy`: 5 s doubling up to 1 h, half of it randomised.
 *
 * ```ts
 * retryDelay(3, 120, Math.random())          // ≥ 120 s
 * serverDelay("Wed, 21 Oct 2026 07:28:00 GMT", null, Date.now())
 * ```
 */
export interface RetryPolicy {
  initialDelay: number;
  maximumDelay: number;
  jitter: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { initialDelay: 5, maximumDelay: 3600, jitter: 0.5 };

/** Seconds to wait after `failures` consecutive failures (≥ 1); `random` in [0, 1). */
export function retryDelay(failures: number, serverAsked: number | null, random: number, policy: RetryPolicy = DEFAULT_RETRY_POLICY): number {
  const exponent = Math.min(Math.max(failures - 1, 0), 30);
  const base = Math.min(policy.maximumDelay, policy.initialDelay * 2 ** exponent);
  const jittered = base * (1 - policy.jitter) + base * policy.jitter * random;
  return Math.max(jittered, serverAsked ?? 0);
}

/** Seconds a `Retry-After` (seconds or HTTP-date) or `Backoff` (seconds) header asks for; `now` in ms. */
export function serverDelay(retryAfter: string | null, backoff: string | null, now: number): number | null {
  const asked: number[] = [];
  const seconds = (text: string | null) => {
    if (text === null || !/^\s*[0-9]+(\.[0-9]+)?\s*$/.test(text)) return null;
    return Number(text.trim());
  };
  const b = seconds(backoff);
  if (b !== null) asked.push(b);
  if (retryAfter !== null) {
    const s = seconds(retryAfter);
    if (s !== null) asked.push(s);
    else {
      const date = Date.parse(retryAfter.trim());
      if (!Number.isNaN(date)) asked.push(Math.max(0, (date - now) / 1000));
    }
  }
  return asked.length ? Math.max(...asked) : null;
}
