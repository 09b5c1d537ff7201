import { describe, expect, it } from 'vitest';
import { giversOf, type ResizeStep, ScheduleGivers } from './schedule-givers';

// The cost of the givers' bound at the largest shard count (8,192), found by an attack review of
// 91f85ac (each receiver read every giver: 4,194,304 reads in one turn). A growth 4,096 -> 8,192
// gives each new shard 4,096 givers, all busy here (an entry due within the second): a turn reads
// each once, whichever receivers need it.
describe('the givers bound at 8,192 shards', () => {
  const now = Date.now();
  const growth: ResizeStep[] = [{ version: 2, from: 4096, to: 8192, switchAt: now - 60_000 }];

  it('one release turn of a member owning every shard (1,024 receivers, the per-turn cap) reads each giver about once, not once per receiver', async () => {
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
    givers.beginTurn();
    for (let shard = 4096; shard < 4096 + 1024; shard++) await givers.bound(shard);
    expect({ giversEach: giversOf(4096, growth, 8192, now).length, reads }).toEqual({ giversEach: 4096, reads: 4096 });
  });
});
