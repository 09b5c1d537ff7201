import type { ChainableCommander } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { pipelineShardProbes, readShardProbes } from './cutover';

// A shrink's drain check (cutover.ts, pipelineShardProbes) reads a removed shard with separate
// commands while its owner may still move an entry between them (SPEC 10.5). This models one entry
// and every way it can move between two probes, and checks the probes never all miss an entry that
// is not acknowledged by the end: a race test against a real Redis cannot pick the moment.

/** Where the entry is; `pastLastDelivered`: a copy of it is in the stream past the group's last-delivered id read before. */
type Place = 'schedule' | 'deferred' | 'undelivered' | 'pending' | 'acked';
interface Entry {
  place: Place;
  pastLastDelivered: boolean;
}

/** The moves the shard's owner makes (releaseDue-8.lua, a read, deferFenced-5.lua, an ack). */
function movesOf(entry: Entry): Entry[] {
  switch (entry.place) {
    case 'schedule':
    case 'deferred':
      return [{ place: 'undelivered', pastLastDelivered: true }]; // released with a new id, at the stream's end
    case 'undelivered':
      return [{ ...entry, place: 'pending' }];
    case 'pending':
      return [
        { ...entry, place: 'deferred' },
        { ...entry, place: 'acked' },
      ];
    case 'acked':
      return [];
  }
}

/** Every sequence of at most `steps` moves from `entry`, each with where it ends. */
function pathsFrom(entry: Entry, steps: number): Entry[][] {
  if (steps === 0) return [[entry]];
  return [[entry], ...movesOf(entry).flatMap((next) => pathsFrom(next, steps - 1).map((path) => [entry, ...path]))];
}

/** A pipeline that answers each probe from the entry's place when the probe is queued. */
function modelPipeline(now: () => Entry, beforeEachProbe: () => void) {
  const replies: [Error | null, unknown][] = [];
  const names: string[] = [];
  const answer = (name: string, reply: unknown) => {
    names.push(name);
    replies.push([null, reply]);
  };
  const pipeline = {
    xpending() {
      beforeEachProbe();
      answer('xpending', now().place === 'pending' ? [['id']] : []);
      return pipeline;
    },
    echo() {
      beforeEachProbe();
      answer('echo', '');
      return pipeline;
    },
    zcard(key: string) {
      beforeEachProbe();
      answer(`zcard ${key}`, now().place === key ? 1 : 0);
      return pipeline;
    },
    xrange() {
      beforeEachProbe();
      const entry = now();
      answer('xrange', entry.place === 'undelivered' || entry.pastLastDelivered ? [['id', []]] : []);
      return pipeline;
    },
  };
  return { pipeline: pipeline as unknown as ChainableCommander, replies, names };
}

const starts: Entry[] = [
  { place: 'schedule', pastLastDelivered: false },
  { place: 'deferred', pastLastDelivered: false },
  { place: 'pending', pastLastDelivered: false }, // delivered before the last-delivered id was read
  { place: 'undelivered', pastLastDelivered: true },
];
const PROBES = 4;
/** A removed shard under a drain, with pending entries when its group was read. */
const PROBE = {
  stream: 's',
  schedule: 'schedule',
  deferred: 'deferred',
  consumerGroup: 'g',
  lastDelivered: '0-0',
  pending: true,
  end: '+',
};

describe('a drain check: the probes of a removed shard', () => {
  it('are asked in the order entries move: XPENDING, the deferred schedule, the schedule, the stream last', () => {
    const { pipeline, names } = modelPipeline(
      () => ({ place: 'acked', pastLastDelivered: false }),
      () => {},
    );
    pipelineShardProbes(pipeline, PROBE);
    expect(names).toEqual(['xpending', 'zcard deferred', 'zcard schedule', 'xrange']);
  });

  it('never all miss an entry that is not acknowledged by the end, however it moves between them', () => {
    let checked = 0;
    for (const start of starts) {
      // Up to 3 moves before each of the 4 probes, in every split: each path and each way to spread it.
      for (const path of pathsFrom(start, 6)) {
        for (const split of splits(path.length - 1, PROBES)) {
          let at = 0;
          let probe = 0;
          const { pipeline, replies } = modelPipeline(
            () => path[at],
            () => {
              at += split[probe++];
            },
          );
          pipelineShardProbes(pipeline, PROBE);
          const seen = readShardProbes(replies, true);
          const final = path[at];
          if (final.place !== 'acked') {
            expect(seen.undelivered || seen.pending || seen.scheduled, `${JSON.stringify(path.slice(0, at + 1))} by ${split}`).toBe(true);
            checked++;
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(100);
  });
});

/** Every way to spread `moves` moves over `gaps` gaps (before each probe), in order. */
function splits(moves: number, gaps: number): number[][] {
  if (gaps === 1) return [[moves]];
  const out: number[][] = [];
  for (let first = 0; first <= moves; first++) for (const rest of splits(moves - first, gaps - 1)) out.push([first, ...rest]);
  return out;
}
