/**
 * The ChaCha20 keystream (RFC 8439 §2.3–2.4), which LtHash16 expands each record hash with.
 * Only what the digest needs: a 32-byte key, a 12-byte nonce, a starting block counter.
 *
 * ```ts
 * const lanes = chacha20Keystream(key, new Uint8Array(12), 1, 2048);
 * ```
 */
export function chacha20Keystream(key: Uint8Array, nonce: Uint8Array, counter: number, length: number): Uint8Array {
  if (key.length !== 32 || nonce.length !== 12) throw new RangeError("ChaCha20 needs a 32-byte key and a 12-byte nonce");
  const kv = new DataView(key.buffer, key.byteOffset, 32);
  const nv = new DataView(nonce.buffer, nonce.byteOffset, 12);
  const init = new Uint32Array(16);
  init[0] = 0x61707865; init[1] = 0x3320646e; init[2] = 0x79622d32; init[3] = 0x6b206574;
  for (let i = 0; i < 8; i++) init[4 + i] = kv.getUint32(i * 4, true);
  init[13] = nv.getUint32(0, true); init[14] = nv.getUint32(4, true); init[15] = nv.getUint32(8, true);
  const out = new Uint8Array(length);
  const ov = new DataView(out.buffer);
  const x = new Uint32Array(16);
  for (let block = 0; block * 64 < length; block++) {
    init[12] = (counter + block) >>> 0;
    x.set(init);
    for (let i = 0; i < 10; i++) {
      quarter(x, 0, 4, 8, 12); quarter(x, 1, 5, 9, 13); quarter(x, 2, 6, 10, 14); quarter(x, 3, 7, 11, 15);
      quarter(x, 0, 5, 10, 15); quarter(x, 1, 6, 11, 12); quarter(x, 2, 7, 8, 13); quarter(x, 3, 4, 9, 14);
    }
    for (let i = 0; i < 16; i++) {
      const offset = block * 64 + i * 4;
      if (offset + 4 <= length) ov.setUint32(offset, (x[i] + init[i]) >>> 0, true);
      else for (let b = 0; offset + b < length; b++) out[offset + b] = (((x[i] + init[i]) >>> 0) >>> (8 * b)) & 0xff;
    }
  }
  return out;
}

function quarter(x: Uint32Array, a: number, b: number, c: number, d: number): void {
  x[a] += x[b]; x[d] = rotl(x[d] ^ x[a], 16);
  x[c] += x[d]; x[b] = rotl(x[b] ^ x[c], 12);
  x[a] += x[b]; x[d] = rotl(x[d] ^ x[a], 8);
  x[c] += x[d]; x[b] = rotl(x[b] ^ x[c], 7);
}

const rotl = (v: number, n: number) => ((v << n) | (v >>> (32 - n))) >>> 0;
