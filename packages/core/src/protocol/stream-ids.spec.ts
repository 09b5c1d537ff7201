import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { compareStreamIds, nextStreamId } from './stream-ids';

const streamId = fc
  .tuple(fc.nat({ max: 2 ** 48 }), fc.bigInt({ min: 0n, max: 2n ** 64n - 2n }))
  .map(([ms, seq]) => ({ ms: BigInt(ms), seq, text: `${ms}-${seq}` }));
const order = (a: { ms: bigint; seq: bigint }, b: { ms: bigint; seq: bigint }) =>
  a.ms !== b.ms ? (a.ms < b.ms ? -1 : 1) : a.seq === b.seq ? 0 : a.seq < b.seq ? -1 : 1;

describe('stream ids', () => {
  it('compare as Redis orders them (milliseconds, then sequence)', () => {
    fc.assert(
      fc.property(streamId, streamId, (a, b) => {
        expect(compareStreamIds(a.text, b.text)).toBe(order(a, b));
      }),
      { numRuns: 2000 },
    );
  });

  it('the next id is greater, and nothing lies between (sequence numbers beyond 2^53 included)', () => {
    fc.assert(
      fc.property(streamId, (a) => {
        const next = nextStreamId(a.text);
        expect(next).toBe(`${a.ms}-${a.seq + 1n}`);
        expect(compareStreamIds(next, a.text)).toBe(1);
      }),
      { numRuns: 2000 },
    );
    expect(nextStreamId('5')).toBe('5-1');
  });
});
