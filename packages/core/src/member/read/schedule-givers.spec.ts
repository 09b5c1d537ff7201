import { describe, expect, it } from 'vitest';
import type { ScheduleBound } from '../../redis/shard-client';
import { boundOf, giversOf, parseResizeHistory, type ResizeStep, ScheduleGivers } from './schedule-givers';

const DAY_MS = 24 * 60 * 60 * 1000;
const now = Date.now();

describe('giversOf', () => {
  const givenTo = (history: ResizeStep[], countNow: number, span: number) =>
    Array.from({ length: span }, (_, shard) => giversOf(shard, history, countNow, now));

  it("a growth's new shards get keys from every old shard, and the old shards from none", () => {
    expect(givenTo([{ version: 2, from: 2, to: 4, switchAt: now }], 4, 4)).toEqual([[], [], [0, 1], [0, 1]]);
  });

  it("a shrink's surviving shards get keys from the removed ones, and the removed ones (draining) from none", () => {
    expect(givenTo([{ version: 2, from: 4, to: 2, switchAt: now }], 2, 4)).toEqual([[2, 3], [2, 3], [], []]);
  });

  it('unites the counts of a history against the count now, never naming the shard itself', () => {
    const history: ResizeStep[] = [
      { version: 2, from: 2, to: 4, switchAt: now - 1000 },
      { version: 3, from: 4, to: 3, switchAt: now },
    ];
    // Under 2 shards, keys of shards 0 and 1 that route to shard 2 now; under 4, shard 3's. Shard 3,
    // removed, moves the keys it received in the growth: after their older entries on 0 and 1.
    expect(givenTo(history, 3, 4)).toEqual([[3], [3], [0, 1, 3], [0, 1]]);
  });

  it('a shrink and a growth back give keys one way only: no two shards wait for each other', () => {
    const history: ResizeStep[] = [
      { version: 2, from: 4, to: 2, switchAt: now - 1000 },
      { version: 3, from: 2, to: 4, switchAt: now },
    ];
    const givers = givenTo(history, 4, 4);
    expect(givers).toEqual([[], [], [0, 1], [0, 1]]);
    givers.forEach((from, shard) => {
      for (const giver of from) expect(giver).toBeLessThan(shard);
    });
  });

  it('a count whose switch away is older than the longest delay a send may ask for gives nothing', () => {
    expect(givenTo([{ version: 2, from: 4, to: 2, switchAt: now - 366 * DAY_MS }], 2, 2)).toEqual([[], []]);
  });

  it('a count the history ends on that is not the count now (an unordered growth since) still gives', () => {
    expect(givenTo([{ version: 2, from: 4, to: 2, switchAt: now - 366 * DAY_MS }], 3, 3)).toEqual([[], [], [0, 1]]);
  });
});

describe('boundOf', () => {
  it('two shards waiting for each other never both hold their first entries: the lower one releases a tie', () => {
    // A survivor (0) waits for a removed shard (3) that received keys from it in a growth, and 3 for 0.
    for (const [first0, first3] of [
      [100, 100],
      [100, 200],
      [200, 100],
      [99.5, 100],
    ]) {
      const zeroReleases = first0 < boundOf(0, 3, first3);
      const threeReleases = first3 < boundOf(3, 0, first0);
      expect(zeroReleases || threeReleases, `${first0} / ${first3}`).toBe(true);
    }
    expect(boundOf(0, 3, 100)).toBe(100.25);
    expect(boundOf(3, 0, 100)).toBe(100);
  });
});

describe('parseResizeHistory', () => {
  it('reads the steps, and nothing from an empty, malformed or non-list value', () => {
    expect(parseResizeHistory('[{"version":2,"from":2,"to":4,"switchAt":5,"until":7}]')).toEqual([
      { version: 2, from: 2, to: 4, switchAt: 5 },
    ]);
    expect(parseResizeHistory('{}')).toEqual([]);
    expect(parseResizeHistory('not json')).toEqual([]);
    expect(parseResizeHistory(null)).toEqual([]);
    expect(parseResizeHistory('[{"version":"x","from":2,"to":4,"switchAt":5}]')).toEqual([]);
  });
});

describe('ScheduleGivers', () => {
  const shrink: ResizeStep[] = [{ version: 2, from: 3, to: 1, switchAt: now - 1000 }];

  function givers(answers: Map<number, ScheduleBound>) {
    const reads: number[] = [];
    const client = {
      scheduleBound: async (shard: number) => {
        reads.push(shard);
        return answers.get(shard)!;
      },
    };
    return { reads, sources: new ScheduleGivers(client) };
  }

  it('bounds nothing for a shard no resize gave keys, without a read', async () => {
    const { reads, sources } = givers(new Map());
    sources.setHistory([], 1, 1);
    expect(await sources.bound(0)).toBeUndefined();
    expect(reads).toEqual([]);
  });

  it("is the lowest first score among the givers, naming the giver; a giver's entry waiting to move bounds everything", async () => {
    const answers = new Map<number, ScheduleBound>([
      [1, { first: now + 60_000, switched: true, version: 2 }],
      [2, { first: -5, switched: true, version: 2 }],
    ]);
    const { sources } = givers(answers);
    sources.setHistory(shrink, 1, 2);
    // Shard 2 is above shard 0: its bound is inclusive (boundOf).
    expect(await sources.bound(0)).toEqual({ bound: -4.75, by: 2 });
  });

  it('reads each giver once a turn, whichever receivers need it', async () => {
    const answers = new Map<number, ScheduleBound>([
      [1, { first: now + 60_000, switched: true, version: 2 }],
      [2, { first: now - 10, switched: true, version: 2 }],
    ]);
    const { reads, sources } = givers(answers);
    sources.setHistory(shrink, 1, 2);
    sources.beginTurn();
    expect(await sources.bound(0)).toEqual({ bound: now - 9.75, by: 2 });
    expect(await sources.bound(0)).toEqual({ bound: now - 9.75, by: 2 });
    expect(reads).toEqual([1, 2]);
    // The next turn reads them again (an operator may have made an entry due meanwhile).
    answers.set(1, { first: now - 20, switched: true, version: 2 });
    sources.beginTurn();
    expect(await sources.bound(0)).toEqual({ bound: now - 19.75, by: 1 });
    expect(reads).toEqual([1, 2, 1, 2]);
  });

  it('a giver found empty after its switch is not read again until the metadata changes; before its switch it is', async () => {
    const answers = new Map<number, ScheduleBound>([
      [1, { first: null, switched: true, version: 2 }],
      [2, { first: null, switched: false, version: 2 }],
    ]);
    const { reads, sources } = givers(answers);
    sources.setHistory(shrink, 1, 2);
    for (let turn = 0; turn < 3; turn++) {
      sources.beginTurn();
      expect(await sources.bound(0)).toEqual({ bound: Number.POSITIVE_INFINITY, by: 1 });
    }
    expect(reads).toEqual([1, 2, 2, 2]);
    sources.setHistory(shrink, 1, 3);
    sources.beginTurn();
    await sources.bound(0);
    expect(reads).toEqual([1, 2, 2, 2, 1, 2]);
  });
});
