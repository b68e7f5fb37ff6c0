/**
 * XXH64 (xxHash, 64-bit, seed 0 by default), the record hash of the state checksum
 * (PROTOCOL.md §3). BigInt keeps it short and exact; records are small, so its speed
 * (~1 µs per 100 bytes) is not what limits an apply.
 *
 * ```ts
 * xxh64(new TextEncoder().encode("abc")).toString(16)  // "44bc2cf5ad770999"
 * ```
 */
const M = 0xffffffffffffffffn;
const P1 = 0x9e3779b185ebca87n;
const P2 = 0xc2b2ae3d27d4eb4fn;
const P3 = 0x165667b19e3779f9n;
const P4 = 0x85ebca77c2b2ae63n;
const P5 = 0x27d4eb2f165667c5n;

const rotl = (x: bigint, r: bigint) => ((x << r) | (x >> (64n - r))) & M;
const round = (acc: bigint, input: bigint) => (rotl((acc + input * P2) & M, 31n) * P1) & M;
const mergeRound = (acc: bigint, val: bigint) => (((acc ^ round(0n, val)) * P1) + P4) & M;

export function xxh64(bytes: Uint8Array, seed = 0n): bigint {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const len = bytes.length;
  let p = 0;
  let h: bigint;
  if (len >= 32) {
    let v1 = (seed + P1 + P2) & M;
    let v2 = (seed + P2) & M;
    let v3 = seed;
    let v4 = (seed - P1) & M;
    for (; p + 32 <= len; p += 32) {
      v1 = round(v1, view.getBigUint64(p, true));
      v2 = round(v2, view.getBigUint64(p + 8, true));
      v3 = round(v3, view.getBigUint64(p + 16, true));
      v4 = round(v4, view.getBigUint64(p + 24, true));
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M;
    h = mergeRound(h, v1);
    h = mergeRound(h, v2);
    h = mergeRound(h, v3);
    h = mergeRound(h, v4);
  } else {
    h = (seed + P5) & M;
  }
  h = (h + BigInt(len)) & M;
  for (; p + 8 <= len; p += 8) {
    h ^= round(0n, view.getBigUint64(p, true));
    h = (rotl(h, 27n) * P1 + P4) & M;
  }
  if (p + 4 <= len) {
    h ^= (BigInt(view.getUint32(p, true)) * P1) & M;
    h = (rotl(h, 23n) * P2 + P3) & M;
    p += 4;
  }
  for (; p < len; p++) {
    h ^= (BigInt(bytes[p]) * P5) & M;
    h = (rotl(h, 11n) * P1) & M;
  }
  h ^= h >> 33n;
  h = (h * P2) & M;
  h ^= h >> 29n;
  h = (h * P3) & M;
  h ^= h >> 32n;
  return h;
}
