import { describe, expect, it } from 'vitest';
import type { Cutover } from '../../admin/cutover';
import { scheduleHeldShards } from './cutover-watch';

// Which shards' schedules a member holds (releaseDue-8.lua ARGV[7]): the surviving shards of an
// ordered shrink it is cutting over live, and nothing else (docs/resharding.md, Shrinking).

const shrink: Cutover = {
  version: 3,
  from: 4,
  to: 2,
  ordered: true,
  resizedAt: 1000,
  switchAt: 2000,
  until: 4000,
  wait: [2, 3],
  waitUntil: 'drained',
  held: [0, 1],
  replay: false,
  late: [],
};

describe('scheduleHeldShards', () => {
  it("holds an ordered shrink's surviving shards", () => {
    expect([...scheduleHeldShards(shrink)]).toEqual([0, 1]);
  });

  it('holds nothing for no cutover, an unordered shrink, a growth or a replayed step', () => {
    expect(scheduleHeldShards(null).size).toBe(0);
    expect(scheduleHeldShards({ ...shrink, ordered: false, held: [] }).size).toBe(0);
    expect(scheduleHeldShards({ ...shrink, from: 2, to: 4, wait: [0, 1], waitUntil: 'until', held: [] }).size).toBe(0);
    expect(scheduleHeldShards({ ...shrink, replay: true, held: [0, 1, 2, 3], wait: [0, 1, 2, 3], waitUntil: 'until' }).size).toBe(0);
  });
});
