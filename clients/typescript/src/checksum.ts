import { utf8 } from "./json.js";
import { xxh64 } from "./xxh64.js";

/**
 * The state checksum (PROTOCOL.md §3): the sum mod 2^64 of the XXH64 of every visible
 * record's canonical bytes. Order-independent, so it is maintained in O(changed records).
 *
 * ```ts
 * const sum = new StateChecksum();
 * sum.add('{"id":"AD"}');
 * sum.hex  // "3fb3dace205370dc"
 * ```
 */
export class StateChecksum {
  constructor(public value = 0n) {}

  static fromHex(hex: string): StateChecksum {
    if (!/^[0-9a-f]{16}$/.test(hex)) throw new RangeError(`not a checksum: ${JSON.stringify(hex)}`);
    return new StateChecksum(BigInt("0x" + hex));
  }

  /** A record (canonical text) became visible. */
  add(canonical: string): void {
    this.value = (this.value + recordHash(canonical)) & 0xffffffffffffffffn;
  }

  /** A visible record (canonical text) was replaced or hidden. */
  remove(canonical: string): void {
    this.value = (this.value - recordHash(canonical)) & 0xffffffffffffffffn;
  }

  get hex(): string {
    return this.value.toString(16).padStart(16, "0");
  }
}

/** XXH64 of a record's canonical bytes. */
export function recordHash(canonical: string): bigint {
  return xxh64(utf8(canonical));
}
