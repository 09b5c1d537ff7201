/**
 * Key routing: `shardForKey(key, shardCount) = jumpConsistentHash(fnv1a64(utf8(key)), shardCount)`.
 *
 * - FNV-1a, 64 bit, over the key's UTF-8 bytes: stable across processes, versions and platforms.
 * - Jump consistent hash (Lamping and Veach, 2014): when the shard count grows from N to N + 1,
 *   only about 1/(N + 1) of the keys move, all to the new shard; that is what resharding relies on.
 *
 * Changing either function would move keys between shards and break per-key order across a
 * deployment; treat it as part of the stored format.
 */
const MASK_64 = 0xffffffffffffffffn;
const JUMP_MULTIPLIER = 2862933555777941757n;
const TWO_32 = 4294967296;
const encoder = new TextEncoder();

/**
 * FNV-1a 64 on 32-bit halves: the prime is 2^40 + 0x1b3, so h * prime = (h << 40) + h * 0x1b3,
 * which plain doubles compute exactly (no BigInt per byte on the producer's hot path).
 */
function fnv1a64Halves(key: string): [number, number] {
  let hi = 0xcbf29ce4;
  let lo = 0x84222325;
  const step = (byte: number) => {
    lo = (lo ^ byte) >>> 0;
    const loProduct = lo * 0x1b3;
    hi = (hi * 0x1b3 + Math.floor(loProduct / TWO_32) + ((lo << 8) >>> 0)) % TWO_32;
    lo = loProduct % TWO_32;
  };
  let ascii = true;
  for (let i = 0; i < key.length && ascii; i++) ascii = key.charCodeAt(i) <= 0x7f;
  if (ascii) {
    for (let i = 0; i < key.length; i++) step(key.charCodeAt(i));
  } else {
    for (const byte of encoder.encode(key)) step(byte);
  }
  return [hi, lo];
}

export function fnv1a64(key: string): bigint {
  const [hi, lo] = fnv1a64Halves(key);
  return (BigInt(hi) << 32n) | BigInt(lo);
}

export function jumpConsistentHash(key: bigint, buckets: number): number {
  if (!Number.isInteger(buckets) || buckets < 1) throw new RangeError(`buckets must be a positive integer, got ${buckets}`);
  let k = key & MASK_64;
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    k = (k * JUMP_MULTIPLIER + 1n) & MASK_64;
    j = Math.floor(((b + 1) * 2 ** 31) / (Number(k >> 33n) + 1));
  }
  return b;
}

export function shardForKey(key: string, shardCount: number): number {
  return jumpConsistentHash(fnv1a64(key), shardCount);
}
