/**
 * XXH64 (xxHash, 64-bit, seed 0), the record hash of the state checksum (PROTOCOL.md §3).
 *
 * Written on pairs of 32-bit halves rather than BigInt: an apply hashes every record it
 * changes, and BigInt arithmetic allocates on every operation (about 8× slower here).
 *
 * ```ts
 * xxh64(new TextEncoder().encode("abc")).toString(16)  // "44bc2cf5ad770999"
 * ```
 */

// 64-bit constants as [high, low] halves.
const P1H = 0x9e3779b1, P1L = 0x85ebca87;
const P2H = 0xc2b2ae3d, P2L = 0x27d4eb4f;
const P3H = 0x165667b1, P3L = 0x9e3779f9;
const P4H = 0x85ebca77, P4L = 0xc2b2ae63;
const P5H = 0x27d4eb2f, P5L = 0x165667c5;

// Results of the helpers below (no allocation per operation).
let rh = 0;
let rl = 0;

function mul(ah: number, al: number, bh: number, bl: number): void {
  const a0 = al & 0xffff, a1 = al >>> 16, b0 = bl & 0xffff, b1 = bl >>> 16;
  const p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  rl = (((mid & 0xffff) << 16) | (p00 & 0xffff)) >>> 0;
  const high = p11 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16);
  rh = (high + Math.imul(ah, bl) + Math.imul(al, bh)) >>> 0;
}

function add(ah: number, al: number, bh: number, bl: number): void {
  const low = al + bl;
  rl = low >>> 0;
  rh = (ah + bh + (low > 0xffffffff ? 1 : 0)) >>> 0;
}

/** Rotation left by r, 0 < r < 32. */
function rotl(h: number, l: number, r: number): void {
  rh = ((h << r) | (l >>> (32 - r))) >>> 0;
  rl = ((l << r) | (h >>> (32 - r))) >>> 0;
}

/** acc = rotl(acc + input × P2, 31) × P1 */
function round(accH: number, accL: number, inH: number, inL: number): void {
  mul(inH, inL, P2H, P2L);
  add(accH, accL, rh, rl);
  rotl(rh, rl, 31);
  mul(rh, rl, P1H, P1L);
}

/** acc = (acc ^ round(0, val)) × P1 + P4 */
function mergeRound(accH: number, accL: number, valH: number, valL: number): void {
  round(0, 0, valH, valL);
  mul((accH ^ rh) >>> 0, (accL ^ rl) >>> 0, P1H, P1L);
  add(rh, rl, P4H, P4L);
}

function u32(b: Uint8Array, p: number): number {
  return (b[p] | (b[p + 1] << 8) | (b[p + 2] << 16) | (b[p + 3] << 24)) >>> 0;
}

/** XXH64 of `bytes` with seed 0, as an unsigned BigInt. */
export function xxh64(bytes: Uint8Array): bigint {
  const [h, l] = xxh64Halves(bytes);
  return (BigInt(h) << 32n) | BigInt(l);
}

/** XXH64 of the first `len` bytes of `bytes`, seed 0, as [high, low] 32-bit halves. */
export function xxh64Halves(bytes: Uint8Array, len = bytes.length): [number, number] {
  let p = 0;
  let hH: number, hL: number;
  if (len >= 32) {
    add(P1H, P1L, P2H, P2L);
    let v1H = rh, v1L = rl;
    let v2H = P2H, v2L = P2L;
    let v3H = 0, v3L = 0;
    // 0 − P1 mod 2^64
    let v4H = (~P1H) >>> 0, v4L = (-P1L) >>> 0;  // P1L is not 0: the subtraction borrows
    for (; p + 32 <= len; p += 32) {
      round(v1H, v1L, u32(bytes, p + 4), u32(bytes, p)); v1H = rh; v1L = rl;
      round(v2H, v2L, u32(bytes, p + 12), u32(bytes, p + 8)); v2H = rh; v2L = rl;
      round(v3H, v3L, u32(bytes, p + 20), u32(bytes, p + 16)); v3H = rh; v3L = rl;
      round(v4H, v4L, u32(bytes, p + 28), u32(bytes, p + 24)); v4H = rh; v4L = rl;
    }
    rotl(v1H, v1L, 1); hH = rh; hL = rl;
    rotl(v2H, v2L, 7); add(hH, hL, rh, rl); hH = rh; hL = rl;
    rotl(v3H, v3L, 12); add(hH, hL, rh, rl); hH = rh; hL = rl;
    rotl(v4H, v4L, 18); add(hH, hL, rh, rl); hH = rh; hL = rl;
    mergeRound(hH, hL, v1H, v1L); hH = rh; hL = rl;
    mergeRound(hH, hL, v2H, v2L); hH = rh; hL = rl;
    mergeRound(hH, hL, v3H, v3L); hH = rh; hL = rl;
    mergeRound(hH, hL, v4H, v4L); hH = rh; hL = rl;
  } else {
    hH = P5H; hL = P5L;
  }
  add(hH, hL, Math.floor(len / 0x100000000), len >>> 0); hH = rh; hL = rl;
  for (; p + 8 <= len; p += 8) {
    round(0, 0, u32(bytes, p + 4), u32(bytes, p));
    hH = (hH ^ rh) >>> 0; hL = (hL ^ rl) >>> 0;
    rotl(hH, hL, 27);
    mul(rh, rl, P1H, P1L);
    add(rh, rl, P4H, P4L); hH = rh; hL = rl;
  }
  if (p + 4 <= len) {
    mul(0, u32(bytes, p), P1H, P1L);
    hH = (hH ^ rh) >>> 0; hL = (hL ^ rl) >>> 0;
    rotl(hH, hL, 23);
    mul(rh, rl, P2H, P2L);
    add(rh, rl, P3H, P3L); hH = rh; hL = rl;
    p += 4;
  }
  for (; p < len; p++) {
    mul(0, bytes[p], P5H, P5L);
    hH = (hH ^ rh) >>> 0; hL = (hL ^ rl) >>> 0;
    rotl(hH, hL, 11);
    mul(rh, rl, P1H, P1L); hH = rh; hL = rl;
  }
  // Avalanche: h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32.
  hL = (hL ^ (hH >>> 1)) >>> 0;
  mul(hH, hL, P2H, P2L); hH = rh; hL = rl;
  hL = (hL ^ ((hL >>> 29) | (hH << 3))) >>> 0;
  hH = (hH ^ (hH >>> 29)) >>> 0;
  mul(hH, hL, P3H, P3L); hH = rh; hL = rl;
  hL = (hL ^ hH) >>> 0;
  return [hH, hL];
}
