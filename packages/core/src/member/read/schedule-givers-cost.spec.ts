import { describe, expect, it } from 'vitest';
import { giversOf, type ResizeStep, ScheduleGivers } from './schedule-givers';

// Attack review of 91f85ac: the cost of the givers' bound at the largest shard count (8,192). A
// growth 4,096 -> 8,192 gives each new shard 4,096 givers. In a real member the stream's
// metadataVersion is the markers' plus one as soon as a group completed the cutover
// (completeCutover-14.lua), so no read is ever kept: modelled here by the markers answering the
// resize's version while the member's history is of the next one.
describe('the givers bound at 8,192 shards', () => {
  const now = Date.now();
  const growth: ResizeStep[] = [{ version: 2, from: 4096, to: 8192, switchAt: now - 60_000 }];

  it.fails('one release turn of a member owning every shard (1,024 receivers, the per-turn cap) reads each giver about once, not once per receiver', async () => {
    let reads = 0;
    const client = {
      scheduleBound: async () => {
        reads++;
        // A busy giver: its first entry due within the second (read again however it is kept).
        return { first: now + 200, switched: true, version: 2 };
      },
    };
    const givers = new ScheduleGivers(client);
    givers.setHistory(growth, 8192, 3);
    const started = performance.now();
    for (let shard = 4096; shard < 4096 + 1024; shard++) await givers.bound(shard);
    const ms = Math.round(performance.now() - started);
    console.log({ receivers: 1024, giversEach: giversOf(4096, growth, 8192, now).length, scheduleBoundReads: reads, ms });
    expect(reads).toBeLessThanOrEqual(8192);
  });
});
