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
const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK_64 = 0xffffffffffffffffn;
const JUMP_MULTIPLIER = 2862933555777941757n;
const encoder = new TextEncoder();

export function fnv1a64(key: string): bigint {
  let hash = FNV_OFFSET;
  for (const byte of encoder.encode(key)) {
    hash ^= BigInt(byte);
    hash = (hash * FNV_PRIME) & MASK_64;
  }
  return hash;
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
