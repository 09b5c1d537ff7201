import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fnv1a64, jumpConsistentHash, shardForKey } from './key-hash';

describe('key routing', () => {
  it('FNV-1a 64 matches the published test vectors', () => {
    expect(fnv1a64('')).toBe(0xcbf29ce484222325n);
    expect(fnv1a64('a')).toBe(0xaf63dc4c8601ec8cn);
    expect(fnv1a64('foobar')).toBe(0x85944171f73967e8n);
  });

  it('the 32-bit-halves FNV-1a equals a plain BigInt FNV-1a for any string, ASCII or not', () => {
    const reference = (key: string) => {
      let hash = 0xcbf29ce484222325n;
      for (const byte of new TextEncoder().encode(key)) hash = ((hash ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
      return hash;
    };
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' })), (key) => {
        expect(fnv1a64(key)).toBe(reference(key));
      }),
      { numRuns: 3000 },
    );
  });

  it('jump consistent hash keeps every key in range and refuses a bucket count below 1', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), fc.integer({ min: 1, max: 100_000 }), (key, n) => {
        const bucket = jumpConsistentHash(key, n);
        expect(Number.isInteger(bucket) && bucket >= 0 && bucket < n).toBe(true);
      }),
      { numRuns: 2000 },
    );
    expect(() => jumpConsistentHash(1n, 0)).toThrow(/buckets must be a positive integer/);
  });

  it('is stable: the same key always routes to the same shard', () => {
    fc.assert(
      fc.property(fc.string(), fc.integer({ min: 1, max: 4096 }), (key, n) => {
        expect(shardForKey(key, n)).toBe(shardForKey(key, n));
        expect(shardForKey(key, n)).toBeGreaterThanOrEqual(0);
        expect(shardForKey(key, n)).toBeLessThan(n);
      }),
      { numRuns: 2000 },
    );
  });

  it('growing from N to N + 1 shards moves keys only to the new shard, about 1/(N + 1) of them', () => {
    const keys = Array.from({ length: 20_000 }, (_, i) => `user-${i}`);
    for (const n of [1, 4, 7, 12]) {
      let moved = 0;
      for (const key of keys) {
        const before = shardForKey(key, n);
        const after = shardForKey(key, n + 1);
        if (before !== after) {
          expect(after).toBe(n);
          moved += 1;
        }
      }
      expect(moved / keys.length).toBeGreaterThan(0.8 / (n + 1));
      expect(moved / keys.length).toBeLessThan(1.2 / (n + 1));
    }
  });

  it('spreads keys evenly', () => {
    const counts = new Array(8).fill(0);
    for (let i = 0; i < 40_000; i++) counts[shardForKey(`order-${i}`, 8)] += 1;
    for (const count of counts) expect(Math.abs(count - 5000)).toBeLessThan(400);
  });
});
