import { describe, expect, it } from 'vitest';
import { check, type Fault, type Produced, type RecordLine } from './reliability/checker';

/** The checker must catch each kind of broken promise; a checker that passes everything proves nothing. */
const produced: Produced[] = [
  { id: '1-0', shard: 0, key: 'a', seq: 1 },
  { id: '2-0', shard: 0, key: 'a', seq: 2 },
  { id: '3-0', shard: 1, key: 'b', seq: 1 },
];

function run(m: string, s: number, id: string, k: string, q: number, start: number, end: number | undefined): RecordLine[] {
  const base = { m, s, id, k, q };
  return [{ e: 'start', t: start, ...base }, ...(end === undefined ? [] : [{ e: 'end', t: end, ...base }])];
}
const ack = (m: string, s: number, ids: string[], ok: boolean, t: number): RecordLine => ({ e: 'ack', t, m, s, ids, ok });

describe('reliability checker', () => {
  it('a clean run: nothing lost, no violation, no overlap, no duplicate', () => {
    const lines = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '2-0', 'a', 2, 12, 13), ...run('p1', 1, '3-0', 'b', 1, 10, 12), ack('p0', 0, ['1-0', '2-0'], true, 14)];
    const report = check(produced, lines, [], new Set());
    expect(report).toMatchObject({ produced: 3, handled: 3, acknowledged: 3, lost: [], orderViolations: [], overlaps: [], duplicates: 0 });
  });

  it('finds lost entries: never handled to the end, or handled but never acknowledged', () => {
    const lines = [...run('p0', 0, '1-0', 'a', 1, 10, undefined), ...run('p0', 0, '2-0', 'a', 2, 12, 13), ...run('p1', 1, '3-0', 'b', 1, 10, 12)];
    const report = check(produced, lines, [], new Set(['1/3-0']));
    expect(report.lost).toEqual(['0/1-0 (a#1)', '1/3-0 (b#1) not acknowledged']);
    expect(report.acknowledged).toBe(2);
  });

  it('finds a per-key order violation, but not a redelivery', () => {
    const swapped = [...run('p0', 0, '2-0', 'a', 2, 10, 11), ...run('p0', 0, '1-0', 'a', 1, 12, 13)];
    expect(check(produced.slice(0, 2), swapped, [], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 0, p0)']);
    const redelivered = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '2-0', 'a', 2, 12, 13), ...run('p1', 0, '1-0', 'a', 1, 20, 21)];
    expect(check(produced.slice(0, 2), redelivered, [{ kind: 'kill', target: 'p0', at: 15 }], new Set()).orderViolations).toEqual([]);
  });

  it('finds two members on one shard at once when the earlier acknowledgement counted, not when it was refused', () => {
    const lines = [...run('zombie', 0, '1-0', 'a', 1, 10, 30), ...run('heir', 0, '1-0', 'a', 1, 20, 21), ...run('heir', 0, '2-0', 'a', 2, 22, 23)];
    const faults: Fault[] = [{ kind: 'pause', target: 'zombie', at: 11 }];
    expect(check(produced.slice(0, 2), [...lines, ack('zombie', 0, ['1-0'], false, 31)], faults, new Set()).overlaps).toEqual([]);
    expect(check(produced.slice(0, 2), [...lines, ack('zombie', 0, ['1-0'], true, 31)], faults, new Set()).overlaps).toEqual([
      'shard 0: zombie 1-0 and heir 1-0',
      'shard 0: zombie 1-0 and heir 2-0',
    ]);
  });

  it('counts duplicates and flags those no fault explains', () => {
    const lines = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p1', 0, '1-0', 'a', 1, 5000, 5001)];
    const explained = check(produced.slice(0, 1), lines, [{ kind: 'kill', target: 'p0', at: 12 }], new Set());
    expect(explained).toMatchObject({ duplicates: 1, unexplainedDuplicates: [] });
    const elsewhere = check(produced.slice(0, 1), lines, [{ kind: 'kill', target: 'p7', at: 12 }], new Set());
    expect(elsewhere.unexplainedDuplicates).toHaveLength(1);
    const tooLate = check(produced.slice(0, 1), lines, [{ kind: 'redis-restart', at: 6000 }], new Set());
    expect(tooLate.unexplainedDuplicates).toHaveLength(1);
    // A graceful stop finishes and acknowledges what it started: it explains no duplicate.
    const graceful = check(produced.slice(0, 1), lines, [{ kind: 'graceful', target: 'p0', at: 12 }], new Set());
    expect(graceful.unexplainedDuplicates).toHaveLength(1);
  });
});
