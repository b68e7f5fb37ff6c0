import { chacha20Keystream } from "./chacha20.js";
import { utf8 } from "./json.js";
import { sha256, toHex } from "./webcrypto.js";

const LANES = 1024;
const NONCE = new Uint8Array(12);
const DOMAIN = utf8("deltasnap-record-v1\0");

/**
 * The state digest (PROTOCOL.md §8.2): LtHash16, 1,024 lanes of 16 bits, each the sum over
 * every visible record of that record's lane. Homomorphic, so an apply adds and removes
 * only the records it changes. Async because SHA-256 comes from WebCrypto.
 *
 * ```ts
 * const digest = new StateDigest();
 * await digest.add("countries", "AD", '{"id":"AD","name":"Andorra"}');
 * await digest.fingerprint()  // "37d6ec8d…"
 * ```
 */
export class StateDigest {
  readonly lanes: Uint16Array;

  constructor(lanes?: Uint16Array) {
    this.lanes = lanes ? new Uint16Array(lanes) : new Uint16Array(LANES);
  }

  async add(collection: string, id: string, canonical: string): Promise<void> {
    this.addLanes(await recordLanes(collection, id, canonical), 1);
  }

  async remove(collection: string, id: string, canonical: string): Promise<void> {
    this.addLanes(await recordLanes(collection, id, canonical), -1);
  }

  addLanes(record: Uint16Array, sign: 1 | -1): void {
    const lanes = this.lanes;
    for (let i = 0; i < LANES; i++) lanes[i] += sign * record[i];  // Uint16Array wraps mod 2^16
  }

  /** The 2,048 lane bytes, little-endian. */
  bytes(): Uint8Array {
    const out = new Uint8Array(LANES * 2);
    for (let i = 0; i < LANES; i++) {
      out[2 * i] = this.lanes[i] & 0xff;
      out[2 * i + 1] = this.lanes[i] >>> 8;
    }
    return out;
  }

  /** Lowercase hex SHA-256 of the lane bytes: what the signed index carries. */
  async fingerprint(): Promise<string> {
    return toHex(await sha256(this.bytes()));
  }
}

/** One record's lanes: ChaCha20 keystream from block 1 under SHA-256(domain, collection, id, bytes). */
export async function recordLanes(collection: string, id: string, canonical: string): Promise<Uint16Array> {
  const parts = [DOMAIN, utf8(collection + "\0" + id + "\0"), utf8(canonical)];
  const message = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) { message.set(p, offset); offset += p.length; }
  const key = await sha256(message);
  const stream = chacha20Keystream(key, NONCE, 1, LANES * 2);
  const lanes = new Uint16Array(LANES);
  for (let i = 0; i < LANES; i++) lanes[i] = stream[2 * i] | (stream[2 * i + 1] << 8);
  return lanes;
}
