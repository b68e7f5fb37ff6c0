// The npm package (package.json): `npm pack` makes a tarball with dist/ (no registry needed),
// a scratch project installs it offline, imports both entry points ("deltasnap" and
// "deltasnap/protocol") at run time, and type-checks against their declarations with tsc.
// Needs a built dist/ (build.sh), npm and tsc.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { vectors } from "./fixtures.mjs";

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));
const manifest = JSON.parse(readFileSync(join(PACKAGE, "package.json"), "utf8"));

function run(command, args, cwd) {
  const env = { ...process.env, npm_config_update_notifier: "false" };
  delete env.NODE_V8_COVERAGE;
  const result = spawnSync(command, args, { cwd, env, encoding: "utf8" });
  if (result.error) throw new Error(`${command} could not run: ${result.error.message}`);
  assert.equal(result.status, 0, `${command} ${args.join(" ")} failed:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

test("package.json names both entry points, their types and the files to ship", () => {
  assert.equal(manifest.name, "deltasnap");
  assert.match(manifest.version, /^\d+\.\d+\.\d+$/);
  assert.equal(manifest.type, "module");
  assert.deepEqual(Object.keys(manifest.exports), [".", "./protocol", "./internal", "./package.json"]);
  for (const entry of [".", "./protocol", "./internal"]) {
    const { types, default: main } = manifest.exports[entry];
    assert.ok(existsSync(join(PACKAGE, main)), `${main} is built (run build.sh)`);
    assert.ok(existsSync(join(PACKAGE, types)), `${types} is built`);
  }
  assert.equal(manifest.types, manifest.exports["."].types);
  assert.equal(manifest.dependencies, undefined, "no runtime dependency");
});

// Import diagnostics: a missing entry point, or a name it does not export (or exports under another kind).
const IMPORT_ERRORS = new Set(["TS2305", "TS2307", "TS2459", "TS2460", "TS2614", "TS2724", "TS1192"]);

test("the tests use the package as an app does: through its entry points, every imported name declared there", () => {
  const tests = readdirSync(join(PACKAGE, "test")).filter((f) => f.endsWith(".mjs")).concat(readdirSync(join(PACKAGE, "test/support")).map((f) => `support/${f}`));
  for (const f of tests) assert.doesNotMatch(readFileSync(join(PACKAGE, "test", f), "utf8"), /(from\s*|import\()["'`](\.\.?\/)+(\.\.\/)*[^"'`]*dist\/lib\//, `${f} imports a built module directly`);
  // tsc over the tests (checkJs) resolves "deltasnap", "deltasnap/protocol" and "deltasnap/internal"
  // through package.json's exports to their .d.ts, as a user's project does.
  const result = spawnSync("tsc", ["-p", join(PACKAGE, "test")], { encoding: "utf8" });
  if (result.error) throw new Error(`tsc could not run: ${result.error.message}`);
  const lines = result.stdout.split("\n").filter((l) => / error TS\d+/.test(l));
  const importErrors = lines.filter((l) => IMPORT_ERRORS.has(/ error (TS\d+)/.exec(l)[1]));
  assert.deepEqual(importErrors, [], "imports the entry points do not declare");
  assert.ok(!/Cannot find module 'deltasnap/.test(result.stdout), result.stdout);
});

test("npm pack → npm install in a scratch project (offline) → both entry points import and type-check", () => {
  const scratch = mkdtempSync(join(tmpdir(), "deltasnap-package-"));
  try {
    const packed = JSON.parse(run("npm", ["pack", "--json", "--pack-destination", scratch], PACKAGE))[0];
    const files = packed.files.map((f) => f.path);
    for (const f of ["package.json", "README.md", "dist/lib/index.js", "dist/lib/index.d.ts", "dist/lib/protocol.js", "dist/lib/protocol.d.ts",
      "dist/lib/runtime/replica.d.ts", "dist/lib/protocol/json.d.ts", "dist/deltasnap.js", "dist/deltasnap.d.ts"]) {
      assert.ok(files.includes(f), `the tarball holds ${f}`);
    }
    assert.deepEqual(files.filter((f) => /^(src|test|e2e|example|bench|tools)\//.test(f)), [], "sources and tests stay out");
    for (const f of files.filter((f) => f.startsWith("dist/lib/") && f.endsWith(".js"))) {
      assert.ok(files.includes(f.replace(/\.js$/, ".d.ts")), `${f} has its declarations`);
    }

    const app = join(scratch, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "scratch-app", private: true, type: "module" }));
    // No registry is needed (or reachable): the tarball has no dependency.
    run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", "--registry=http://127.0.0.1:9/", join(scratch, packed.filename)], app);
    const installed = JSON.parse(readFileSync(join(app, "node_modules/deltasnap/package.json"), "utf8"));
    assert.equal(installed.version, manifest.version);

    const xxh = vectors.xxh64.find((v) => v.utf8 === "abc");
    writeFileSync(join(app, "main.mjs"), `
      import assert from "node:assert/strict";
      import * as app from "deltasnap";
      import * as protocol from "deltasnap/protocol";
      import { createRequire } from "node:module";
      assert.equal(typeof app.DeltaSnapReplica.open, "function");
      assert.equal(typeof app.DeltaSnapView.open, "function");
      assert.equal(app.TrustError, protocol.TrustError, "one error class behind both entry points");
      assert.equal(app.canonicalize, undefined, "the app API leaves the wire-level modules to deltasnap/protocol");
      assert.equal(protocol.DeltaSnapReplica, undefined);
      // Storage internals are the internal entry's, not the app API's.
      const internal = await import("deltasnap/internal");
      for (const name of ["TableStore", "TABLES", "newClientId", "MemoryStore", "IndexedDBStore", "EMPTY_STATE", "LiveLoop"]) {
        assert.equal(app[name], undefined, name + " is not in the app API");
        assert.ok(internal[name], name + " is in deltasnap/internal");
      }
      assert.equal(protocol.xxh64(new TextEncoder().encode(${JSON.stringify(xxh.utf8)})).toString(16).padStart(16, "0"), ${JSON.stringify(xxh.xxh64)});
      assert.equal(protocol.canonicalize('{"b":1,"a":2}'), '{"a":2,"b":1}');
      // The app API works in node, kept in memory.
      const replica = await app.DeltaSnapReplica.open({ collection: "countries", storage: new app.MemoryStorage(), autoSync: false, serverURL: "http://127.0.0.1:9" });
      await replica.put("AD", { name: "Andorra" });
      assert.deepEqual(await replica.get("AD"), { id: "AD", name: "Andorra" });
      replica.close();
      // Only the entry points are exported.
      await assert.rejects(import("deltasnap/dist/lib/runtime/store.js"), { code: "ERR_PACKAGE_PATH_NOT_EXPORTED" });
      assert.equal(createRequire(import.meta.url)("deltasnap/package.json").name, "deltasnap");
      console.log("ok");
    `);
    assert.equal(run(process.execPath, ["main.mjs"], app).trim(), "ok");

    // Declarations: a TypeScript app type-checks against both entry points (package exports, strict, lib checks on).
    writeFileSync(join(app, "consumer.ts"), `
      import { DeltaSnapReplica, DeltaSnapView, MemoryStorage, indexedDBStorage, WriteRefusedError } from "deltasnap";
      import type { PullOutcome, ReplicaOptions, ReplicaStatus, ReplicaStorage, ReplicaStore, ViewSyncReport } from "deltasnap";
      import { canonicalize, parseSignedIndex, StateChecksum, xxh64 } from "deltasnap/protocol";
      import type { Body, SignedIndex } from "deltasnap/protocol";
      type Country = { id: string; name: string };
      const storage: ReplicaStorage = typeof indexedDB === "undefined" ? new MemoryStorage() : indexedDBStorage;
      const options: ReplicaOptions = { collection: "countries", storage, autoSync: false, serverURL: "http://127.0.0.1:9" };
      const replica: DeltaSnapReplica = await DeltaSnapReplica.open(options);
      const ad: Country | undefined = await replica.get<Country>("AD");
      const status: ReplicaStatus = await replica.status();
      const indicator: "green" | "amber" | "red" = status.indicator;
      const store: ReplicaStore = (await storage.open("other")).store;
      const outcome: PullOutcome = (await replica.sync())?.pull ?? { kind: "not-modified" };
      try { await replica.insert("AD", { name: "again" }); } catch (e) { if (e instanceof WriteRefusedError) console.log(e.code, e.id); }
      const view: DeltaSnapView = await DeltaSnapView.open({ accessToken: "a.b.c", storage });
      const report: ViewSyncReport = await view.sync();
      const hash: bigint = xxh64(new Uint8Array([1, 2, 3]));
      const text: string = canonicalize("{}");
      const index: SignedIndex = parseSignedIndex("{}");
      const sum: string = new StateChecksum().hex;
      let body: Body | null = null;
      console.log(ad, indicator, store.name, outcome.kind, report.held, hash, text, index.sequence, sum, body);
    `);
    run("tsc", ["--noEmit", "--strict", "--skipLibCheck", "false", "--module", "node16", "--moduleResolution", "node16", "--target", "es2022",
      "--lib", "es2022,dom,dom.iterable", "consumer.ts"], app);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});
