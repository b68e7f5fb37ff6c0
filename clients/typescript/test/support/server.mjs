// A real `deltasnap serve` on a free loopback port for node tests: started by the test,
// stopped by its PID. The binary is $DELTASNAP_BIN, else $BIN (as .ci/browser-tests.sh sets
// it), else the repository's .build/debug/deltasnap. A missing binary fails the test: nothing
// is skipped.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = fileURLToPath(new URL("../../../../", import.meta.url));
export const ADMIN = "node-test-admin";
export const SECRET = "node-test-jwt-secret";

export function binary() {
  const bin = process.env.DELTASNAP_BIN || process.env.BIN || join(REPO, ".build/debug/deltasnap");
  const path = bin.startsWith("/") ? bin : join(REPO, bin);
  if (!existsSync(path)) throw new Error(`the deltasnap binary ${path} is missing: run 'swift build' first, or set DELTASNAP_BIN`);
  return path;
}

/** Runs the CLI; returns stdout (throws with stderr on a failure). */
export function cli(args, input) {
  const run = spawnSync(binary(), args, { input, encoding: "utf8", env: { ...process.env, NODE_V8_COVERAGE: "" } });
  if (run.status !== 0) throw new Error(`deltasnap ${args.join(" ")} failed (${run.status}): ${run.stderr}`);
  return run.stdout;
}

/**
 * A store with `countries` (the sample data), partitioned collections under access rules
 * (attempts: read/write by their owner; sets: by members; memberships in `members`), a
 * signing key, and a server on it. Options: `signed` (default true) serves a signed index.
 */
export async function startServer({ signed = true, extraArgs = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "deltasnap-node-"));
  const db = join(dir, "store.sqlite");
  cli(["import", "--db", db, "--collection", "countries", "--quiet", join(REPO, "Snapshots/sample/countries.ndjson")]);
  cli(["keygen", "--out", join(dir, "keys")]);
  const publicKey = readFileSync(join(dir, "keys/signing.pub"), "utf8").trim();
  writeFileSync(join(dir, "rules.yaml"), [
    "collections:",
    "  countries: { read: public, write: claims }",
    "  notes: { read: public, write: claims }",
    "  attempts: { partitioned: true, read: owner, write: owner }",
    "  sets: { partitioned: true, read: member, write: member }",
    "memberships: members",
    "",
  ].join("\n"));
  const seed = [
    ["attempts/alice", { id: "a1", score: 3 }], ["attempts/bob", { id: "b1", score: 5 }],
    ["sets/8271", { id: "q1", question: "2+2" }], ["sets/9000", { id: "q1", question: "3+3" }],
    ["members/alice", { id: "sets/8271", role: "write" }], ["notes", { id: "n1", text: "first" }],
  ];
  for (const [collection, record] of seed) cli(["import", "--db", db, "--collection", collection, "--quiet", "-"], JSON.stringify(record) + "\n");
  const tokens = {};
  for (const who of ["alice", "bob"]) tokens[who] = cli(["token", "--secret", SECRET, "--subject", who, "--write", "countries,notes"]).trim();
  const args = ["serve", "--db", db, "--port", "0", "--write-token", ADMIN, "--jwt-secret", SECRET, "--rules", join(dir, "rules.yaml"),
    "--log-level", "error", "--wait-debounce-ms", "10", ...(signed ? ["--signing-key", join(dir, "keys/signing.key")] : []), ...extraArgs];
  const child = spawn(binary(), args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NODE_V8_COVERAGE: "" } });
  let output = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`deltasnap serve did not come up: ${output}`)), 15_000);
    const look = (chunk) => {
      output += chunk;
      const match = /http:\/\/127\.0\.0\.1:(\d+)/.exec(output);
      if (match) { clearTimeout(timer); resolve(Number(match[1])); }
    };
    child.stdout.on("data", look);
    child.stderr.on("data", look);
    child.on("exit", (code) => { clearTimeout(timer); reject(new Error(`deltasnap serve exited (${code}): ${output}`)); });
  });
  child.removeAllListeners("exit");
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 150; i++) {
    try { if ((await fetch(`${url}/healthz`)).status === 200) break; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  const server = {
    url, dir, db, publicKey, tokens, pid: child.pid,
    /** An admin request; returns { status, headers, json }. */
    async admin(method, path, body) {
      const response = await fetch(url + path, {
        method, headers: { Authorization: `Bearer ${ADMIN}`, "Content-Type": "application/json" },
        body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
      });
      const text = await response.text();
      let json = null;
      try { json = JSON.parse(text); } catch { /* not JSON */ }
      return { status: response.status, headers: response.headers, json, text };
    },
    /** Puts (or, with `null`, deletes) a record as the admin. */
    async set(collection, id, value) {
      const [name, key] = collection.split("/");
      const base = `/v1/collections/${name}` + (key ? `/partitions/${encodeURIComponent(key)}` : "");
      const answer = await server.admin(value === null ? "DELETE" : "PUT", `${base}/records/${encodeURIComponent(id)}`, value === null ? undefined : value);
      if (answer.status >= 300) throw new Error(`${value === null ? "DELETE" : "PUT"} ${collection}/${id}: ${answer.status} ${answer.text}`);
      return answer;
    },
    /** The server's visible record (no token: public collections). */
    async record(collection, id, token) {
      const response = await fetch(`${url}/v1/collections/${collection}`, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
      const text = await response.text();
      const match = text.split("\n").map((line) => { try { return JSON.parse(line.replace(/,$/, "")); } catch { return null; } })
        .find((r) => r && r.id === id);
      return match ?? null;
    },
    /** Stops the server by its PID and removes its files. */
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once("exit", resolve));
        process.kill(child.pid, "SIGTERM");
        const timer = setTimeout(() => { try { process.kill(child.pid, "SIGKILL"); } catch { /* gone */ } }, 10_000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return server;
}
