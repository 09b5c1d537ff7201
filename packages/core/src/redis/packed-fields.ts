/**
 * An entry's fields packed as Redis' Lua `cmsgpack.pack` packs a list of strings (a msgpack array
 * of str, each the bytes as they are): the form a shard's schedule keeps an entry in
 * (lua/includes/schedule.lua), which the release unpacks with `cmsgpack.unpack`. Packed here, the
 * park script stores the bytes as they come instead of building a Lua table and packing it, a part
 * of a park's Redis time (docs/benchmarks.md, section 13).
 */
export function packFields(values: readonly (string | Buffer)[]): Buffer {
  const parts: Buffer[] = [header(values.length, 0x90, 15, 0xdc, 0xdd)];
  for (const value of values) {
    const bytes = typeof value === 'string' ? Buffer.from(value, 'utf8') : value;
    parts.push(strHeader(bytes.length), bytes);
  }
  return Buffer.concat(parts);
}

/** A fixed-size header (up to `fixMax`), else a 16-bit, else a 32-bit one. */
function header(length: number, fix: number, fixMax: number, of16: number, of32: number): Buffer {
  if (length <= fixMax) return Buffer.from([fix | length]);
  if (length <= 0xffff) return Buffer.from([of16, length >> 8, length & 0xff]);
  const out = Buffer.alloc(5);
  out[0] = of32;
  out.writeUInt32BE(length, 1);
  return out;
}

function strHeader(length: number): Buffer {
  if (length < 32) return Buffer.from([0xa0 | length]);
  if (length <= 0xff) return Buffer.from([0xd9, length]);
  return header(length, 0, -1, 0xda, 0xdb);
}
