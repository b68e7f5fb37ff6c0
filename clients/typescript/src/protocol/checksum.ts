import { xxh64Halves } from "./xxh64.js";

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
  // The sum as two 32-bit halves: no BigInt allocation per record.
  private high = 0;
  private low = 0;

  static fromHex(hex: string): StateChecksum {
    if (!/^[0-9a-f]{16}$/.test(hex)) throw new RangeError(`not a checksum: ${JSON.stringify(hex)}`);
    const sum = new StateChecksum();
    sum.high = parseInt(hex.slice(0, 8), 16);
    sum.low = parseInt(hex.slice(8), 16);
    return sum;
  }

  /** A record (canonical text) became visible. */
  add(canonical: string): void {
    const [h, l] = recordHashHalves(canonical);
    const low = this.low + l;
    this.low = low >>> 0;
    this.high = (this.high + h + (low > 0xffffffff ? 1 : 0)) >>> 0;
  }

  /** A visible record (canonical text) was replaced or hidden. */
  remove(canonical: string): void {
    const [h, l] = recordHashHalves(canonical);
    const low = this.low - l;
    this.low = low >>> 0;
    this.high = (this.high - h - (low < 0 ? 1 : 0)) >>> 0;
  }

  get value(): bigint {
    return (BigInt(this.high) << 32n) | BigInt(this.low);
  }

  get hex(): string {
    return this.high.toString(16).padStart(8, "0") + this.low.toString(16).padStart(8, "0");
  }
}

const encoder = new TextEncoder();
let scratch = new Uint8Array(1 << 16);

/** XXH64 of a record's canonical bytes, encoded into one reused buffer. */
function recordHashHalves(canonical: string): [number, number] {
  // UTF-8 takes at most 3 bytes per UTF-16 code unit.
  if (canonical.length * 3 > scratch.length) scratch = new Uint8Array(canonical.length * 3);
  const { written } = encoder.encodeInto(canonical, scratch);
  return xxh64Halves(scratch, written!);
}

/** XXH64 of a record's canonical bytes. */
export function recordHash(canonical: string): bigint {
  const [h, l] = recordHashHalves(canonical);
  return (BigInt(h) << 32n) | BigInt(l);
}
