import { compareUTF8 } from "./json.js";

/**
 * Recognises a record that is already canonical (PROTOCOL.md §2) in one pass over the text,
 * without building a tree: the server sends canonical records, so an apply can hash and
 * store their text as it is. Anything else — whitespace, unsorted members, an escape that
 * is not the canonical one, a `hidden` member, an id or key with an escape — is left to the
 * full parser (which canonicalises it or refuses it). Like the Swift CanonicalRecordScanner.
 *
 * ```ts
 * scanCanonicalRecord('{"id":"AD","n":1}', 0)   // { end: 17, id: "AD" }
 * scanCanonicalRecord('{"n":1, "id":"AD"}', 0)  // null: not canonical
 * ```
 */
export function scanCanonicalRecord(text: string, start: number): { end: number; id: string } | null {
  if (text.charCodeAt(start) !== 0x7b) return null;
  let id: string | null = null;
  let p = start + 1;
  let previousKey: string | null = null;
  if (text.charCodeAt(p) === 0x7d) return null;  // {} has no id
  for (;;) {
    const keyEnd = plainString(text, p);
    if (keyEnd < 0) return null;
    const key = text.slice(p + 1, keyEnd - 1);
    if (previousKey !== null && !(compareUTF8(previousKey, key) < 0)) return null;
    if (key === "hidden") return null;
    previousKey = key;
    if (text.charCodeAt(keyEnd) !== 0x3a) return null;
    const valueStart = keyEnd + 1;
    if (key === "id") {
      const idEnd = plainString(text, valueStart);
      if (idEnd < 0 || idEnd === valueStart + 2) return null;
      id = text.slice(valueStart + 1, idEnd - 1);
      p = idEnd;
    } else {
      p = value(text, valueStart, 1);
      if (p < 0) return null;
    }
    const c = text.charCodeAt(p);
    if (c === 0x2c) { p++; continue; }
    if (c === 0x7d) return id === null ? null : { end: p + 1, id };
    return null;
  }
}

/** End of a string without any escape (keys, ids), or -1. */
function plainString(text: string, p: number): number {
  if (text.charCodeAt(p) !== 0x22) return -1;
  for (let i = p + 1; ; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c === 0x5c || c < 0x20 || Number.isNaN(c)) return -1;
  }
}

/** End of a canonical string (only the escapes §2 writes), or -1. */
function canonicalString(text: string, p: number): number {
  if (text.charCodeAt(p) !== 0x22) return -1;
  for (let i = p + 1; ; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c < 0x20 || Number.isNaN(c)) return -1;
    if (c !== 0x5c) continue;
    const e = text.charCodeAt(i + 1);
    if (e === 0x22 || e === 0x5c || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) { i++; continue; }
    if (e !== 0x75 || text.charCodeAt(i + 2) !== 0x30 || text.charCodeAt(i + 3) !== 0x30) return -1;
    const hex = text.slice(i + 4, i + 6);
    if (!/^[01][0-9a-f]$/.test(hex)) return -1;
    const code = parseInt(hex, 16);
    // These have a short form, which canonical text uses.
    if (code === 0x08 || code === 0x09 || code === 0x0a || code === 0x0c || code === 0x0d) return -1;
    i += 5;
  }
}

function value(text: string, p: number, depth: number): number {
  if (depth > 64) return -1;
  const c = text.charCodeAt(p);
  if (c === 0x22) return canonicalString(text, p);
  if (c === 0x7b) {
    let q = p + 1;
    if (text.charCodeAt(q) === 0x7d) return q + 1;
    let previousKey: string | null = null;
    for (;;) {
      const keyEnd = plainString(text, q);
      if (keyEnd < 0) return -1;
      const key = text.slice(q + 1, keyEnd - 1);
      if (previousKey !== null && !(compareUTF8(previousKey, key) < 0)) return -1;
      previousKey = key;
      if (text.charCodeAt(keyEnd) !== 0x3a) return -1;
      q = value(text, keyEnd + 1, depth + 1);
      if (q < 0) return -1;
      const d = text.charCodeAt(q);
      if (d === 0x2c) { q++; continue; }
      return d === 0x7d ? q + 1 : -1;
    }
  }
  if (c === 0x5b) {
    let q = p + 1;
    if (text.charCodeAt(q) === 0x5d) return q + 1;
    for (;;) {
      q = value(text, q, depth + 1);
      if (q < 0) return -1;
      const d = text.charCodeAt(q);
      if (d === 0x2c) { q++; continue; }
      return d === 0x5d ? q + 1 : -1;
    }
  }
  if (c === 0x74) return text.startsWith("true", p) ? p + 4 : -1;
  if (c === 0x66) return text.startsWith("false", p) ? p + 5 : -1;
  if (c === 0x6e) return text.startsWith("null", p) ? p + 4 : -1;
  return number(text, p);
}

function number(text: string, p: number): number {
  let q = p;
  const digits = () => {
    const from = q;
    for (let c = text.charCodeAt(q); c >= 0x30 && c <= 0x39; c = text.charCodeAt(++q));
    return q - from;
  };
  if (text.charCodeAt(q) === 0x2d) q++;
  if (text.charCodeAt(q) === 0x30) q++;
  else if (digits() === 0) return -1;
  if (text.charCodeAt(q) === 0x2e) {
    q++;
    if (digits() === 0) return -1;
  }
  const e = text.charCodeAt(q);
  if (e === 0x65 || e === 0x45) {
    q++;
    const s = text.charCodeAt(q);
    if (s === 0x2b || s === 0x2d) q++;
    if (digits() === 0) return -1;
  }
  return q;
}
