import { JSONParseError } from "./errors.js";

/**
 * A JSON number kept as the literal it was written as: PROTOCOL.md §2 makes `1.0` and `1`
 * different records, and large integers keep every digit, which a JS `number` cannot.
 */
export class JsonNumber {
  constructor(readonly literal: string) {}
}

/** A parsed JSON value that keeps everything canonical form needs (§2). Objects are Maps. */
export type JsonValue = null | boolean | string | JsonNumber | JsonValue[] | JsonObject;
export type JsonObject = Map<string, JsonValue>;

const MAX_DEPTH = 512;

/**
 * Parses one JSON document strictly (RFC 8259, duplicate keys and lone surrogates refused),
 * keeping number literals as written.
 *
 * ```ts
 * canonicalString(parseJSON('{ "b": 1.50, "a": true }'))  // '{"a":true,"b":1.50}'
 * ```
 */
export function parseJSON(text: string): JsonValue {
  const reader = new JsonReader(text);
  const value = reader.readValue(0);
  reader.skipWhitespace();
  if (reader.pos !== text.length) reader.fail("unexpected text after the JSON value");
  return value;
}

/** A cursor over JSON text; exported for the body reader, which reads member by member. */
export class JsonReader {
  pos = 0;
  constructor(readonly text: string) {}

  fail(message: string): never {
    throw new JSONParseError(message, this.pos);
  }

  skipWhitespace(): void {
    const t = this.text;
    let p = this.pos;
    for (;;) {
      const c = t.charCodeAt(p);
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) p++;
      else break;
    }
    this.pos = p;
  }

  expect(char: string): void {
    this.skipWhitespace();
    if (this.text[this.pos] !== char) this.fail(`expected '${char}'`);
    this.pos++;
  }

  /** Consumes `char` if it comes next (after whitespace). */
  accept(char: string): boolean {
    this.skipWhitespace();
    if (this.text[this.pos] === char) {
      this.pos++;
      return true;
    }
    return false;
  }

  readValue(depth: number): JsonValue {
    if (depth > MAX_DEPTH) this.fail("nesting deeper than " + MAX_DEPTH);
    this.skipWhitespace();
    const c = this.text.charCodeAt(this.pos);
    switch (c) {
      case 0x7b: return this.readObject(depth);
      case 0x5b: return this.readArray(depth);
      case 0x22: return this.readString();
      case 0x74: return this.readWord("true", true);
      case 0x66: return this.readWord("false", false);
      case 0x6e: return this.readWord("null", null);
      default:
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.readNumber();
        return this.fail(Number.isNaN(c) ? "unexpected end of text" : "unexpected character");
    }
  }

  private readWord<T>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail(`expected '${word}'`);
    this.pos += word.length;
    return value;
  }

  private readObject(depth: number): JsonObject {
    this.pos++;
    const object: JsonObject = new Map();
    if (this.accept("}")) return object;
    for (;;) {
      this.skipWhitespace();
      if (this.text.charCodeAt(this.pos) !== 0x22) this.fail("expected a member name");
      const key = this.readString();
      if (object.has(key)) this.fail(`duplicate member "${key}"`);
      this.expect(":");
      object.set(key, this.readValue(depth + 1));
      if (this.accept(",")) continue;
      this.expect("}");
      return object;
    }
  }

  private readArray(depth: number): JsonValue[] {
    this.pos++;
    const array: JsonValue[] = [];
    if (this.accept("]")) return array;
    for (;;) {
      array.push(this.readValue(depth + 1));
      if (this.accept(",")) continue;
      this.expect("]");
      return array;
    }
  }

  private readNumber(): JsonNumber {
    const t = this.text;
    const start = this.pos;
    let p = start;
    const digits = () => {
      const from = p;
      while (t.charCodeAt(p) >= 0x30 && t.charCodeAt(p) <= 0x39) p++;
      return p - from;
    };
    if (t.charCodeAt(p) === 0x2d) p++;
    if (t.charCodeAt(p) === 0x30) p++;
    else if (digits() === 0) { this.pos = p; this.fail("invalid number"); }
    if (t.charCodeAt(p) === 0x2e) {
      p++;
      if (digits() === 0) { this.pos = p; this.fail("invalid number: no digit after '.'"); }
    }
    const e = t.charCodeAt(p);
    if (e === 0x65 || e === 0x45) {
      p++;
      const sign = t.charCodeAt(p);
      if (sign === 0x2b || sign === 0x2d) p++;
      if (digits() === 0) { this.pos = p; this.fail("invalid number: no digit in the exponent"); }
    }
    this.pos = p;
    return new JsonNumber(t.slice(start, p));
  }

  readString(): string {
    const t = this.text;
    let p = this.pos + 1;
    let out = "";
    let runStart = p;
    for (;;) {
      const c = t.charCodeAt(p);
      if (c === 0x22) break;
      if (Number.isNaN(c)) { this.pos = p; this.fail("unterminated string"); }
      if (c < 0x20) { this.pos = p; this.fail("control character in a string"); }
      if (c >= 0xd800 && c <= 0xdfff) {
        // Raw text decoded from UTF-8 never holds a lone surrogate, a JS string may.
        const next = t.charCodeAt(p + 1);
        if (c > 0xdbff || !(next >= 0xdc00 && next <= 0xdfff)) { this.pos = p; this.fail("lone surrogate"); }
        p += 2;
        continue;
      }
      if (c !== 0x5c) { p++; continue; }
      out += t.slice(runStart, p);
      const esc = t.charCodeAt(p + 1);
      p += 2;
      switch (esc) {
        case 0x22: out += '"'; break;
        case 0x5c: out += "\\"; break;
        case 0x2f: out += "/"; break;
        case 0x62: out += "\b"; break;
        case 0x66: out += "\f"; break;
        case 0x6e: out += "\n"; break;
        case 0x72: out += "\r"; break;
        case 0x74: out += "\t"; break;
        case 0x75: {
          const unit = this.hex4(p);
          p += 4;
          if (unit >= 0xd800 && unit <= 0xdbff) {
            if (t.charCodeAt(p) !== 0x5c || t.charCodeAt(p + 1) !== 0x75) { this.pos = p; this.fail("lone surrogate"); }
            const low = this.hex4(p + 2);
            if (low < 0xdc00 || low > 0xdfff) { this.pos = p; this.fail("lone surrogate"); }
            p += 6;
            out += String.fromCharCode(unit, low);
          } else if (unit >= 0xdc00 && unit <= 0xdfff) {
            this.pos = p;
            this.fail("lone surrogate");
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.pos = p - 1;
          this.fail("invalid escape");
      }
      runStart = p;
    }
    out += t.slice(runStart, p);
    this.pos = p + 1;
    return out;
  }

  private hex4(p: number): number {
    const s = this.text.slice(p, p + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(s)) { this.pos = p; this.fail("invalid \\u escape"); }
    return parseInt(s, 16);
  }
}

/**
 * Orders strings by the bytes of their UTF-8 encoding (§2), which is code point order. JS
 * compares UTF-16 code units, where U+E000…U+FFFF sort above surrogate pairs: remap those.
 */
export function compareUTF8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x === y) continue;
    if (x >= 0xd800) x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
    if (y >= 0xd800) y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
    return x - y;
  }
  return a.length - b.length;
}

const SHORT_ESCAPES: Record<number, string> = { 0x08: "\\b", 0x0c: "\\f", 0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5c: "\\\\" };

/** A string literal as §2 writes it: only `"`, `\` and control characters escaped. */
export function canonicalStringLiteral(s: string): string {
  let out = '"';
  let runStart = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c !== 0x22 && c !== 0x5c) continue;
    out += s.slice(runStart, i) + (SHORT_ESCAPES[c] ?? "\\u00" + c.toString(16).padStart(2, "0"));
    runStart = i + 1;
  }
  return out + s.slice(runStart) + '"';
}

/** The canonical text (§2) of a value; its UTF-8 encoding is the canonical bytes. */
export function canonicalString(value: JsonValue): string {
  if (value === null) return "null";
  if (value === true) return "true";
  if (value === false) return "false";
  if (typeof value === "string") return canonicalStringLiteral(value);
  if (value instanceof JsonNumber) return value.literal;
  if (Array.isArray(value)) return "[" + value.map(canonicalString).join(",") + "]";
  const keys = [...value.keys()].sort(compareUTF8);
  return "{" + keys.map((k) => canonicalStringLiteral(k) + ":" + canonicalString(value.get(k)!)).join(",") + "}";
}

/** Canonical text of JSON text (§2). Throws `JSONParseError` for invalid JSON. */
export function canonicalize(text: string): string {
  return canonicalString(parseJSON(text));
}

/**
 * Converts an app's plain JS value into the literal-preserving form. Goes through
 * `JSON.stringify`, so it accepts exactly what JSON can say (no `undefined` members, no NaN).
 */
export function fromPlain(value: unknown): JsonValue {
  const text = JSON.stringify(value);
  if (text === undefined) throw new JSONParseError("the value cannot be written as JSON", 0);
  return parseJSON(text);
}

/** UTF-8 bytes of a string (one shared encoder: creating one per record is slow). */
const encoder = new TextEncoder();
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}
