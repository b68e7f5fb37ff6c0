/**
 * DeltaSnap's operator console (`deltasnap serve --console`, at `/console/`): collections and
 * partitions (searched, never listed whole), records by id with history and revert, the
 * review queue with side-by-side diffs and approve / decline / roll back, recent pushes and
 * health. It signs in with the admin token, kept in this tab's sessionStorage and sent as a
 * bearer token only — never in a URL, never in a cookie. No runtime dependencies; values are
 * shown in canonical JSON with the browser client's own protocol module (`deltasnap/protocol`).
 */
import { canonicalString, fromPlain } from "deltasnap/protocol";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const TOKEN_KEY = "deltasnap-console-token";
let token: string | null = sessionStorage.getItem(TOKEN_KEY);

// MARK: - The API

class ConsoleError extends Error {}

async function api(method: string, path: string, body?: unknown): Promise<Obj> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  let value: Obj = {};
  try { value = JSON.parse(text); } catch { /* not JSON */ }
  if (!response.ok) {
    throw new ConsoleError(`${response.status} ${typeof value.error === "string" ? value.error : ""}: ${typeof value.message === "string" ? value.message : text.slice(0, 200)}`);
  }
  return value;
}

/** `/v1/collections/NAME` or `/v1/collections/NAME/partitions/KEY`. */
function base(path: string): string {
  const slash = path.indexOf("/");
  return slash < 0 ? `/v1/collections/${encodeURIComponent(path)}` : `/v1/collections/${encodeURIComponent(path.slice(0, slash))}/partitions/${encodeURIComponent(path.slice(slash + 1))}`;
}

const show = (value: Json | undefined) => (value === undefined ? "(absent)" : canonicalString(fromPlain(value)));

// MARK: - DOM helpers (text only: no markup from data ever reaches innerHTML)

function el<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, string> = {}, ...children: (Node | string | null)[]): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  for (const child of children) if (child !== null) node.append(child);
  return node;
}

function table(target: HTMLElement, headings: string[], rows: (Node | string)[][], onClick?: (index: number) => void): void {
  target.replaceChildren(el("tr", {}, ...headings.map((h) => el("th", {}, h))));
  rows.forEach((cells, index) => {
    const row = el("tr", onClick ? { class: "clickable" } : {}, ...cells.map((c) => el("td", {}, c)));
    if (onClick) row.addEventListener("click", () => onClick(index));
    target.append(row);
  });
}

function button(label: string, action: () => Promise<void>, kind = ""): HTMLButtonElement {
  const b = el("button", { type: "button", class: kind }, label);
  b.addEventListener("click", () => run(action));
  return b;
}

function failed(message: string | null): void {
  const banner = $("error");
  banner.hidden = message === null;
  banner.textContent = message ?? "";
}

async function run(action: () => Promise<void>): Promise<void> {
  try {
    failed(null);
    await action();
  } catch (error) {
    failed((error as Error).message);
  }
}

// MARK: - Signing in

async function signIn(candidate: string): Promise<void> {
  token = candidate;
  try {
    await api("GET", "/v1/console/overview");
  } catch (error) {
    token = null;
    throw error;
  }
  sessionStorage.setItem(TOKEN_KEY, candidate);
  $<HTMLInputElement>("token").value = "";
  $("token").hidden = true;
  $("signin-button").hidden = true;
  $("signout").hidden = false;
  $("nav").hidden = false;
  await open("overview");
}

function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
}

// MARK: - Tabs

async function open(tab: string): Promise<void> {
  for (const section of document.querySelectorAll<HTMLElement>(".tab")) section.hidden = section.id !== tab;
  for (const b of document.querySelectorAll<HTMLElement>("nav button")) b.classList.toggle("active", b.dataset.tab === tab);
  if (tab === "overview") await overview();
  if (tab === "collections") await collections();
  if (tab === "reviews") await reviews();
  if (tab === "pushes") await pushes();
}

async function overview(): Promise<void> {
  const o = await api("GET", "/v1/console/overview");
  const store = o.store as Obj;
  const caches = o.caches as Obj;
  $("overview").replaceChildren(
    el("h2", {}, "Health"),
    el("div", { class: "card", id: "health" },
      el("div", {}, "Store: ", el("span", { class: store.reachable ? "ok" : "bad" }, store.reachable ? "reachable" : `unreachable: ${store.problem}`)),
      el("div", {}, `Waiting requests (live clients): ${o.waiters}`),
      el("div", {}, `Heads in memory: ${caches.heads} · cached deltas: ${caches.deltas} · full bodies kept: ${caches.fullBodyBytes} bytes`),
      ...(o.followers as Obj[]).map((f) => el("div", { class: "follower" }, `Follower ${f.name}: last published ${f.lastPublished} (${f.secondsAgo} s ago)` +
        (f.lagBytes !== undefined ? ` · ${bytes(Number(f.lagBytes))} of the source's log behind (measured ${f.lagMeasuredSecondsAgo} s ago)` : "")))),
    el("h2", {}, "Reviews waiting"),
    el("div", { class: "card", id: "waiting" }, ...(waiting(o).length ? waiting(o).map((w) => el("div", {}, `${w.path}: requested by ${w.request.by}`)) : ["none"])),
  );
}

/** The requests waiting for a decision, partitions' included. */
function waiting(o: Obj): { path: string; request: Obj }[] {
  return (o.queue as Obj[]).map((q) => ({ path: String(q.path), request: q.request as Obj }));
}

async function collections(): Promise<void> {
  const [list, o] = await Promise.all([api("GET", "/v1/collections"), api("GET", "/v1/console/overview")]);
  const rows = (list.collections as Obj[]);
  table($("collection-list"), ["collection", "token", "records", "bytes", "last commit"],
    rows.map((c) => [String(c.name), String(c.token), String(c.count), sizeCell(String(c.name)), String(c.lastModified)]),
    (i) => run(() => collection(String(rows[i].name))));
  await fillSizes(rows.map((c) => String(c.name)));
  const select = $<HTMLSelectElement>("partitioned");
  select.replaceChildren(...(o.partitioned as string[]).map((name) => el("option", { value: name }, name)));
  await searchPartitions();
}

async function searchPartitions(): Promise<void> {
  const name = $<HTMLSelectElement>("partitioned").value;
  if (!name) return;
  const prefix = $<HTMLInputElement>("partition-search").value;
  const found = await api("GET", `/v1/console/partitions?collection=${encodeURIComponent(name)}&prefix=${encodeURIComponent(prefix)}&limit=50`);
  const partitions = found.partitions as Obj[];
  table($("partition-list"), ["partition", "version", "records", "bytes", "last commit"],
    partitions.map((p) => [String(p.name), String(p.version), String(p.count), sizeCell(String(p.name)), String(p.lastModified)]),
    (i) => run(() => collection(String(partitions[i].name))));
  await fillSizes(partitions.map((p) => String(p.name)));
}

/** A cell the byte count of `path` lands in once counted (the server reads its records once per version). */
function sizeCell(path: string): HTMLElement {
  return el("span", { class: "size", "data-path": path }, "…");
}

/** Asks for the byte counts of `paths`, 50 at a time, and fills their cells. */
async function fillSizes(paths: string[]): Promise<void> {
  for (let start = 0; start < paths.length; start += 50) {
    const query = paths.slice(start, start + 50).map((p) => `collection=${encodeURIComponent(p)}`).join("&");
    const answer = await api("GET", `/v1/console/sizes?${query}`);
    for (const size of answer.sizes as Obj[]) {
      for (const cell of document.querySelectorAll<HTMLElement>("span.size")) {
        if (cell.dataset.path === String(size.name)) cell.textContent = bytes(Number(size.bytes));
      }
    }
  }
}

function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

/** One collection or partition: its head, a page of records, a record by id with its history and revert. */
async function collection(path: string, after: string | null = null): Promise<void> {
  const page = await api("GET", `/v1/console/records?collection=${encodeURIComponent(path)}&limit=25${after ? `&after=${encodeURIComponent(after)}` : ""}`);
  const head = page.head as Obj;
  const records = page.records as Obj[];
  const view = $("collection-view");
  const lookup = el("input", { id: "record-id", placeholder: "record id", "aria-label": "record id" });
  const detail = el("div", { id: "record-detail" });
  const recordsTable = el("table", { id: "records" });
  table(recordsTable, ["id", "value"], records.map((r) => [String(r.id), el("span", { class: "json" }, show(r))]), (i) => run(() => record(path, String(records[i].id), detail)));
  const next = records.length === 25 ? button("Next page", () => collection(path, String(records[records.length - 1].id)), "secondary") : "";
  view.replaceChildren(
    el("h2", {}, path),
    el("div", { class: "card", id: "head" }, `version ${head.version} · token ${head.token} · ${head.count} records · `, sizeCell(path),
      ` · floor ${head.floor} · last commit ${head.lastModified}`),
    el("div", { class: "card", id: "versions" }, "Versions: ", (page.versions as Obj[]).map((v) => `${v.version} (${v.committedAt})`).join(" · ")),
    el("div", { class: "row" }, lookup, button("Show record", () => record(path, (lookup as HTMLInputElement).value, detail))),
    detail, recordsTable, next,
  );
  await fillSizes([path]);
}

async function record(path: string, id: string, target: HTMLElement): Promise<void> {
  const [found, history] = await Promise.all([
    api("GET", `/v1/console/record?collection=${encodeURIComponent(path)}&id=${encodeURIComponent(id)}`),
    api("GET", `${base(path)}/records/${encodeURIComponent(id)}/history?limit=20`).catch(() => ({ history: [] }) as Obj),
  ]);
  const entries = history.history as Obj[];
  const list = el("table", {});
  table(list, ["replaced", "by", "value (version)", ""], entries.map((h) => [
    String(h.replacedAt), String(h.replacedBy), el("span", { class: "json" }, `${show(h.value)} (${h.version})`),
    button("Revert to this", async () => {
      await api("PUT", `${base(path)}/records/${encodeURIComponent(id)}`, h.value);
      await record(path, id, target);
    }, "secondary"),
  ]));
  target.replaceChildren(el("div", { class: "card" }, el("div", { class: "json" }, found.record === null ? `${id}: no visible record` : show(found.record)), el("h2", {}, "History"), list));
}

// MARK: - Reviews

async function reviews(): Promise<void> {
  const o = await api("GET", "/v1/console/overview");
  const queue = (o.reviews as Obj[]);
  const t = el("table", { id: "review-list" });
  table(t, ["reviewed collection", "editors", "reviewers", "pending"], queue.map((r) => [
    String(r.collection), String(r.editors), String(r.reviewers), r.partitioned ? "per partition: see above" : r.pending ? `requested by ${(r.pending as Obj).by}` : "—",
  ]), (i) => { if (!queue[i].partitioned) run(() => review(String(queue[i].collection))); });
  const pending = waiting(o);
  const w = el("table", { id: "waiting-list" });
  table(w, ["waiting for a decision", "requested by", "when", "changes", "comment"], pending.map((p) => [
    p.path, String(p.request.by), new Date(Number(p.request.at) * 1000).toISOString(), String(p.request.changes),
    typeof p.request.comment === "string" ? p.request.comment : "—",
  ]), (i) => run(() => review(pending[i].path)));
  $("review-queue").replaceChildren(el("h2", {}, "Waiting for a decision"), pending.length ? w : el("div", { class: "card" }, "none"),
    el("h2", {}, "Reviewed collections"), t);
}

/** The change under review, side by side, with the steps and the audit log. */
async function review(path: string, after: string | null = null): Promise<void> {
  const query = `?limit=100${after ? `&after=${encodeURIComponent(after)}` : ""}`;
  const [change, log] = await Promise.all([api("GET", `${base(path)}/review${query}`), api("GET", `${base(path)}/review/log`)]);
  const diff = el("table", { id: "diff" });
  diff.append(el("tr", {}, el("th", {}, "record"), el("th", {}, "member"), el("th", {}, "published"), el("th", {}, "under review")));
  for (const c of change.changes as Obj[]) {
    const members = c.members as Obj[];
    members.forEach((m, index) => {
      diff.append(el("tr", {},
        el("td", { class: String(c.change) }, index === 0 ? `${c.change === "added" ? "+" : c.change === "removed" ? "−" : "~"} ${c.id}` : ""),
        el("td", {}, String(m.member)),
        el("td", { class: "old json" }, show(m.old as Json | undefined)),
        el("td", { class: "new json" }, show(m.new as Json | undefined))));
    });
    if (members.length === 0) diff.append(el("tr", {}, el("td", { class: String(c.change) }, `${c.change} ${c.id}`)));
  }
  const pending = change.pending as Obj | null;
  const comment = el("input", { id: "review-comment", placeholder: "comment (a decline needs one)", "aria-label": "comment" }) as HTMLInputElement;
  const version = el("input", { id: "rollback-version", placeholder: "version", size: "6", "aria-label": "version to roll back to" }) as HTMLInputElement;
  const step = (name: string, extra: Obj = {}) => async () => {
    const body: Obj = { ...extra };
    if (comment.value) body.comment = comment.value;
    await api("POST", `${base(path)}/review/${name}`, body);
    await Promise.all([review(path), reviews()]);
  };
  const entries = (log.entries as Obj[]).map((e) =>
    el("li", {}, `${e.sequence}. ${new Date(Number(e.at) * 1000).toISOString()} ${e.step} by ${e.by}` +
      (e.version !== undefined ? ` → version ${e.version}` : "") + ` (${e.changes} changes)` + (typeof e.comment === "string" ? ` — ${e.comment}` : "")));
  $("review-view").replaceChildren(
    el("h2", {}, `Review of ${path}`),
    el("div", { class: "card", id: "review-state" }, pending ? `Requested by ${pending.by}${typeof pending.comment === "string" ? `: ${pending.comment}` : ""} — the frozen change is shown` : "No request waits — the workspace's change is shown"),
    el("div", { class: "row" }, comment,
      pending ? button("Approve", step("approve")) : button("Request review", step("request")),
      pending ? button("Decline", step("decline"), "danger") : null,
      version, button("Roll back to version", async () => step("rollback", { version: Number(version.value) })(), "secondary")),
    diff,
    change.next ? button("Next changes", () => review(path, String(change.next)), "secondary") : "",
    el("h2", {}, "Audit log"), el("ul", { class: "log", id: "review-log" }, ...entries),
  );
}

// MARK: - Pushes

async function pushes(): Promise<void> {
  const answer = await api("GET", "/v1/console/pushes");
  const list = answer.pushes as Obj[];
  const t = el("table", { id: "push-list" });
  table(t, ["when", "collection", "user", "client", "accepted", "refused", "conflict copies"], list.map((p) => [
    new Date(Number(p.at) * 1000).toISOString(), String(p.collection), String(p.user), String(p.client), String(p.accepted),
    (p.refused as Obj[]).map((r) => `${r.id} (seq ${r.seq}): ${r.error}`).join("; ") || "—",
    (p.copies as Obj[]).map((c) => `${c.id} → ${c.copy}`).join("; ") || "—",
  ]));
  $("pushes").replaceChildren(el("h2", {}, "Recent pushes (newest first)"), t);
}

// MARK: - Start

$("signin").addEventListener("submit", (event) => {
  event.preventDefault();
  run(() => signIn($<HTMLInputElement>("token").value.trim()));
});
$("signout").addEventListener("click", signOut);
for (const b of document.querySelectorAll<HTMLElement>("nav button")) b.addEventListener("click", () => run(() => open(b.dataset.tab!)));
let searchTimer: ReturnType<typeof setTimeout> | null = null;
$("partition-search").addEventListener("input", () => {
  if (searchTimer) clearTimeout(searchTimer);
  searchTimer = setTimeout(() => run(searchPartitions), 150);
});
$("partitioned").addEventListener("change", () => run(searchPartitions));
$("review-open").addEventListener("click", () => run(() => review($<HTMLInputElement>("review-path").value.trim())));
if (token) run(() => signIn(token!));
document.body.dataset.ready = "1";
