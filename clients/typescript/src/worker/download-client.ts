/**
 * Downloads into OPFS in a dedicated worker (download-worker.ts beside this file, shipped as
 * `download-worker.js` beside the module): a page cannot open OPFS's synchronous access
 * handles, and its `createWritable` plus a read-back to hash made a verified download half
 * as fast as a plain `fetch` into OPFS. Where there is no worker file (an app copied only
 * `deltasnap.js`), no `Worker` or no synchronous handle, the page downloads itself.
 */

/** One download asked of the worker. */
export interface WorkerDownload {
  id: number;
  /** The OPFS folder of all replicas' files, the replica's folder in it, and the file's name there. */
  root: string;
  folder: string;
  key: string;
  url: string;
  headers: Record<string, string>;
  cache: RequestCache;
  /** Bytes already held (asked for with `Range`: a `206` from there is appended). */
  held: number;
  /** The file's size from its reference: more bytes than this are refused. */
  size: number;
  timeoutMs: number;
}

/** The worker's answers: `progress` while it runs, then one of the others. */
export type WorkerReply =
  | { id: number; kind: "ready" }
  | { id: number; kind: "progress"; done: number }
  | { id: number; kind: "unsupported" }
  | { id: number; kind: "no-answer" }
  | { id: number; kind: "status"; status: number }
  | { id: number; kind: "cut"; received: number; at: number }
  | { id: number; kind: "too-long"; received: number }
  | { id: number; kind: "done"; received: number; size: number; sha256: string | null }
  | { id: number; kind: "failed"; name: string; message: string };

type Final = Exclude<WorkerReply, { kind: "ready" } | { kind: "progress" }>;

/** The worker of one page, started on first use; null when the page must download itself. */
export class DownloadWorker {
  private static shared: Promise<DownloadWorker | null> | null = null;
  private next = 1;
  private readonly waiting = new Map<number, { resolve: (reply: Final) => void; progress: (done: number) => void }>();

  private constructor(private readonly worker: Worker) {
    worker.onmessage = (event: MessageEvent<WorkerReply>) => {
      const reply = event.data;
      const job = this.waiting.get(reply.id);
      if (!job) return;
      if (reply.kind === "progress") return job.progress(reply.done);
      if (reply.kind === "ready") return;
      this.waiting.delete(reply.id);
      job.resolve(reply);
    };
    // A worker that dies answers every job it held as failed; the next download starts a new one.
    worker.onerror = () => {
      DownloadWorker.shared = null;
      for (const [id, job] of this.waiting) job.resolve({ id, kind: "unsupported" });
      this.waiting.clear();
    };
  }

  /** The page's worker, once it said it runs; null without `Worker`, or when its file cannot be loaded. */
  static get(): Promise<DownloadWorker | null> {
    DownloadWorker.shared ??= DownloadWorker.start();
    return DownloadWorker.shared;
  }

  private static start(): Promise<DownloadWorker | null> {
    if (typeof Worker === "undefined" || typeof document === "undefined") return Promise.resolve(null);
    let worker: Worker;
    try {
      worker = new Worker(new URL("./download-worker.js", import.meta.url), { type: "module", name: "deltasnap-downloads" });
    } catch {
      return Promise.resolve(null);
    }
    return new Promise((resolve) => {
      worker.onmessage = (event: MessageEvent<WorkerReply>) => { if (event.data.kind === "ready") resolve(new DownloadWorker(worker)); };
      worker.onerror = (event) => { event.preventDefault?.(); worker.terminate(); resolve(null); };
    });
  }

  /** Runs one download; `progress` hears the bytes held so far. */
  run(job: Omit<WorkerDownload, "id">, progress: (done: number) => void): Promise<Final> {
    const id = this.next++;
    return new Promise((resolve) => {
      this.waiting.set(id, { resolve, progress });
      this.worker.postMessage({ ...job, id });
    });
  }
}
