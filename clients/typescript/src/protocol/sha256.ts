import { toHex } from "./webcrypto.js";

/*
 * SHA-256 for files. WebCrypto's `digest` takes the whole input at once — there is no
 * incremental form in any browser — so a file is hashed by it only up to a size that may be
 * held in memory; larger files go through this hand-written, incremental SHA-256 (FIPS
 * 180-4) in bounded memory. Checked against WebCrypto and the shared vectors by the node tests.
 */

const K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
  0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
  0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
  0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

/**
 * Incremental SHA-256.
 *
 * ```ts
 * const hash = new SHA256Stream();
 * for await (const chunk of file.stream()) hash.update(chunk);
 * hash.hex();   // 64 lowercase hex digits
 * ```
 */
export class SHA256Stream {
  private readonly h = new Int32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
  private readonly w = new Int32Array(64);
  private readonly tail = new Uint8Array(64);
  private held = 0;
  /** Bytes taken in so far. */
  length = 0;

  update(data: Uint8Array): this {
    let i = 0;
    const n = data.length;
    this.length += n;
    if (this.held) {
      const take = Math.min(64 - this.held, n);
      this.tail.set(data.subarray(0, take), this.held);
      this.held += take;
      i = take;
      if (this.held < 64) return this;
      this.blocks(this.tail, 0, 64);
      this.held = 0;
    }
    const whole = (n - i) & ~63;
    if (whole) this.blocks(data, i, i + whole);
    i += whole;
    if (i < n) {
      this.tail.set(data.subarray(i), 0);
      this.held = n - i;
    }
    return this;
  }

  /** The digest as 64 lowercase hex digits; the stream is spent. */
  hex(): string {
    const bits = this.length * 8;
    const pad = new Uint8Array(((this.held + 9 + 63) & ~63) - this.held);
    pad[0] = 0x80;
    const view = new DataView(pad.buffer);
    view.setUint32(pad.length - 8, Math.floor(bits / 2 ** 32));
    view.setUint32(pad.length - 4, bits >>> 0);
    this.update(pad);
    const out = new Uint8Array(32);
    const outView = new DataView(out.buffer);
    this.h.forEach((word, i) => outView.setInt32(i * 4, word));
    return toHex(out);
  }

  private blocks(d: Uint8Array, start: number, end: number): void {
    const w = this.w;
    const h = this.h;
    let h0 = h[0], h1 = h[1], h2 = h[2], h3 = h[3], h4 = h[4], h5 = h[5], h6 = h[6], h7 = h[7];
    for (let p = start; p < end; p += 64) {
      for (let t = 0; t < 16; t++) {
        const q = p + t * 4;
        w[t] = (d[q] << 24) | (d[q + 1] << 16) | (d[q + 2] << 8) | d[q + 3];
      }
      for (let t = 16; t < 64; t++) {
        const a = w[t - 15], b = w[t - 2];
        const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
        const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
        w[t] = (w[t - 16] + s0 + w[t - 7] + s1) | 0;
      }
      let a = h0, b = h1, c = h2, d0 = h3, e = h4, f = h5, g = h6, hh = h7;
      for (let t = 0; t < 64; t++) {
        const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
        const t1 = (hh + s1 + ((e & f) ^ (~e & g)) + K[t] + w[t]) | 0;
        const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
        const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
        hh = g; g = f; f = e; e = (d0 + t1) | 0; d0 = c; c = b; b = a; a = (t1 + t2) | 0;
      }
      h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d0) | 0;
      h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + hh) | 0;
    }
    h[0] = h0; h[1] = h1; h[2] = h2; h[3] = h3; h[4] = h4; h[5] = h5; h[6] = h6; h[7] = h7;
  }
}

/** Files up to this many bytes are hashed by WebCrypto in one piece (about 5× faster than {@link SHA256Stream}). */
export const HASH_IN_MEMORY_UP_TO = 128 << 20;

/** Bytes read at a time from a file hashed in pieces. */
const PIECE = 8 << 20;

/**
 * The SHA-256 of a file (a `Blob`), 64 lowercase hex digits: by WebCrypto when it is at most
 * `inMemoryUpTo` bytes (read whole), else streamed through {@link SHA256Stream} 8 MiB at a time.
 */
export async function sha256OfBlob(blob: Blob, inMemoryUpTo = HASH_IN_MEMORY_UP_TO): Promise<string> {
  const subtle = (globalThis as { crypto?: Crypto }).crypto?.subtle;
  if (subtle && blob.size <= inMemoryUpTo) return toHex(new Uint8Array(await subtle.digest("SHA-256", await blob.arrayBuffer())));
  const hash = new SHA256Stream();
  for (let at = 0; at < blob.size; at += PIECE) hash.update(new Uint8Array(await blob.slice(at, at + PIECE).arrayBuffer()));
  return hash.hex();
}
