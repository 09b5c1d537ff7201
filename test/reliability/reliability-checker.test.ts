import { describe, expect, it } from 'vitest';
import { check, collectRuns, type DeadLetter, type Fault, type PendingSample, type Produced, type RecordLine } from './checker';
import type { ReplayWrite } from './records';
import { ALL_FAULT_KINDS, faultKindsOn, selectedFaultKinds } from './fault-selection';
import type { ChaosHarness } from './harness';
import { formatReport } from './report';
import { staleWrites } from './resize-faults';

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

/** Entries a#1 and a#2 on shard 0, and a reset of the default group's shard 0 to its start at 50 ms. */
function twoEntriesResetToStart(): { produced: Produced[]; reset: Fault } {
  return {
    produced: [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 5 },
      { id: '2-0', shard: 0, key: 'a', seq: 2, at: 6 },
    ],
    reset: { kind: 'reset-offsets', at: 50, resets: [{ group: '', shard: 0, from: '2-0', to: '0-0', oldest: '1-0', resetAt: 50 }] },
  };
}

describe('reliability checker', () => {
  it('a clean run: nothing lost, no violation, no overlap, no duplicate', () => {
    const lines = [
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      ...run('p0', 0, '2-0', 'a', 2, 12, 13),
      ...run('p1', 1, '3-0', 'b', 1, 10, 12),
      ack('p0', 0, ['1-0', '2-0'], true, 14),
    ];
    const report = check(produced, lines, [], new Set());
    expect(report).toMatchObject({ produced: 3, handled: 3, acknowledged: 3, lost: [], orderViolations: [], overlaps: [], duplicates: 0 });
  });

  it('finds two runs of one key of a shard at once in one member (lanes must keep a key one at a time), not two keys', () => {
    const keys: Produced[] = [...produced.slice(0, 2), { id: '4-0', shard: 0, key: 'c', seq: 1 }];
    const parallelKeys = [
      ...run('p0', 0, '1-0', 'a', 1, 10, 20),
      ...run('p0', 0, '4-0', 'c', 1, 11, 15),
      ...run('p0', 0, '2-0', 'a', 2, 21, 22),
      ack('p0', 0, ['1-0', '4-0', '2-0'], true, 23),
    ];
    expect(check(keys, parallelKeys, [], new Set()).keyOverlaps).toEqual([]);
    const oneKeyAtOnce = [
      ...run('p0', 0, '1-0', 'a', 1, 10, 20),
      ...run('p0', 0, '2-0', 'a', 2, 15, 22),
      ...run('p0', 0, '4-0', 'c', 1, 11, 15),
      ack('p0', 0, ['1-0', '4-0', '2-0'], true, 23),
    ];
    expect(check(keys, oneKeyAtOnce, [], new Set()).keyOverlaps).toEqual(['a: p0 ran #1 and #2 at once']);
  });

  it('finds lost entries: never handled to the end, or handled but never acknowledged', () => {
    const lines = [
      ...run('p0', 0, '1-0', 'a', 1, 10, undefined),
      ...run('p0', 0, '2-0', 'a', 2, 12, 13),
      ...run('p1', 1, '3-0', 'b', 1, 10, 12),
    ];
    const report = check(produced, lines, [], new Set(['1/3-0']));
    expect(report.lost).toEqual(['0/1-0 (a#1), last run by p0', '1/3-0 (b#1) not acknowledged, last run by p1']);
    expect(report.acknowledged).toBe(2);
  });

  it('finds a per-key order violation, but not a redelivery', () => {
    const swapped = [...run('p0', 0, '2-0', 'a', 2, 10, 11), ...run('p0', 0, '1-0', 'a', 1, 12, 13)];
    expect(check(produced.slice(0, 2), swapped, [], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 0, p0)']);
    const redelivered = [
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      ...run('p0', 0, '2-0', 'a', 2, 12, 13),
      ...run('p1', 0, '1-0', 'a', 1, 20, 21),
    ];
    expect(check(produced.slice(0, 2), redelivered, [{ kind: 'kill', target: 'p0', at: 15 }], new Set()).orderViolations).toEqual([]);
    // Across an unordered resize (the key moved shards), an inversion is what `ordered: false` allows.
    const moved: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 10 },
      { id: '2-0', shard: 1, key: 'a', seq: 2, at: 20 },
    ];
    const inverted = [...run('p0', 1, '2-0', 'a', 2, 30, 31), ...run('p1', 0, '1-0', 'a', 1, 32, 33)];
    expect(check(moved, inverted, [{ kind: 'grow-unordered', at: 15 }], new Set()).orderViolations).toEqual([]);
    expect(check(moved, inverted, [{ kind: 'grow-ordered', at: 15 }], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 0, p1)']);
  });

  it("shows, for an order violation, the key's entries as written, their first runs and the resizes around them (the evidence a failed run keeps)", () => {
    const moved: Produced[] = [
      { id: '1000-0', shard: 2, key: 'stale-8', seq: 43, at: 1_000 },
      { id: '1400-0', shard: 9, key: 'stale-8', seq: 44, at: 1_400 },
    ];
    const lines = [
      { e: 'assigned', t: 1, m: 'p5', g: 'late-1', ep: 3, shards: [9] },
      ...run('p5', 9, '1400-0', 'stale-8', 44, 2_000, 2_001).map((l) => ({ ...l, g: 'late-1' })),
      ...run('p6', 2, '1000-0', 'stale-8', 43, 2_100, 2_101).map((l) => ({ ...l, g: 'late-1' })),
    ];
    const faults: Fault[] = [
      { kind: 'grow-ordered', target: '9->10 (switchAt 990, until 2990)', at: 990 },
      { kind: 'kill', target: 'p1', at: 1_200 },
    ];
    const report = check(moved, lines, faults, new Set(), { groups: ['late-1'], resizeHistory: '[{"from":9,"to":10,"switchAt":990}]' });
    expect(report.orderViolations).toEqual(['late-1: stale-8: 43 after 44 (shard 2, p6)']);
    expect(report.orderEvidence).toEqual([
      'evidence for late-1: stale-8: 43 after 44',
      `  written stale-8#43: shard 2 id 1000-0 confirmed ${new Date(1_000).toISOString()}`,
      `  written stale-8#44: shard 9 id 1400-0 confirmed ${new Date(1_400).toISOString()}`,
      `  first run stale-8#43: shard 2 id 1000-0 by p6 grant ? started ${new Date(2_100).toISOString()}`,
      `  first run stale-8#44: shard 9 id 1400-0 by p5 grant 3 started ${new Date(2_000).toISOString()}`,
      `  fault grow-ordered 9->10 (switchAt 990, until 2990) at ${new Date(990).toISOString()}`,
      '  resizeHistory at the end: [{"from":9,"to":10,"switchAt":990}]',
    ]);
    expect(check(moved, lines.slice(0, 3), faults, new Set(), { groups: ['late-1'] }).orderEvidence).toEqual([]);
  });

  it('a stale-producer or delete-drained fault at four shards records the unordered growth it makes first, so that the checker excuses what that growth reorders', async () => {
    let count = 4;
    const faults: Fault[] = [];
    const h = {
      streamPrefix: 'chaos',
      faults,
      maxShards: 8,
      resizes: 0,
      cutoverBoundMs: () => 1000,
      staleLoad: { proxy: { freeze: () => undefined, thaw: () => undefined } },
      admin: {
        describeStream: async () => ({ shardCount: count }),
        resizeShards: async (_prefix: string, next: number) => {
          count = next;
          return { switchAt: new Date(1_000).toISOString() };
        },
        cutoverStatus: async () => [],
      },
    } as unknown as ChaosHarness;
    const fault: Fault = { kind: 'stale-producer', at: 0 };
    await staleWrites(h, fault, async () => undefined);
    expect(faults.map((f) => [f.kind, f.target])).toEqual([['grow-unordered', '4->5 unordered (switchAt 1000, until 3000)']]);
    expect(fault.target).toBe('5->4 (switchAt 1000, until 2000)');
  });

  it('excuses an inversion across a loss of every key on one shard index between the old owner and the new one (the lost stream and the recreated one), not one written entirely before it', () => {
    const keyOnShard6: Produced[] = [
      { id: '100-0', shard: 6, key: 'stale-27', seq: 23, at: 100 },
      { id: '300-0', shard: 6, key: 'stale-27', seq: 28, at: 300 },
    ];
    // #23 queued at the old owner before the flush, run after the recreated group's owner ran #28.
    const lines = [...run('p3', 6, '300-0', 'stale-27', 28, 400, 401), ...run('p0', 6, '100-0', 'stale-27', 23, 402, 403)];
    const flush: Fault = { kind: 'redis-flush-restart', at: 200, dataLoss: true };
    expect(check(keyOnShard6, lines, [flush], new Set()).orderViolations).toEqual([]);
    expect(check(keyOnShard6, lines, [{ ...flush, at: 50 }], new Set()).orderViolations).toEqual(['stale-27: 23 after 28 (shard 6, p0)']);
    expect(check(keyOnShard6, lines, [], new Set()).orderViolations).toEqual(['stale-27: 23 after 28 (shard 6, p0)']);
  });

  it('finds two members on one shard at once when the earlier acknowledgement counted, not when it was refused', () => {
    const lines = [
      ...run('zombie', 0, '1-0', 'a', 1, 10, 30),
      ...run('heir', 0, '1-0', 'a', 1, 20, 21),
      ...run('heir', 0, '2-0', 'a', 2, 22, 23),
    ];
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

  it('a run again after its member lost the shard on its own (lease-lost, fenced), its first run never acknowledged, is explained; acknowledged, or another shard, it is not', () => {
    // The soak of a7497d4: a manual-acks member's heartbeat answered late (a loaded machine, no fault
    // injected), its lease lost 2 ms before its handler returned; the ack could not go, and the same
    // process ran the entry again once it was granted the shard back.
    const lines = [...run('p0', 0, '1-0', 'a', 1, 344, 409), ...run('p0', 0, '1-0', 'a', 1, 1808, 1809)];
    const lost: RecordLine = { e: 'lease-lost', t: 407, m: 'p0', shards: [0, 1, 2] };
    expect(check(produced.slice(0, 1), [...lines, lost], [], new Set()).unexplainedDuplicates).toEqual([]);
    expect(check(produced.slice(0, 1), [...lines, { ...lost, e: 'fenced' }], [], new Set()).unexplainedDuplicates).toEqual([]);
    expect(check(produced.slice(0, 1), lines, [], new Set()).unexplainedDuplicates).toHaveLength(1);
    expect(check(produced.slice(0, 1), [...lines, { ...lost, shards: [1, 2] }], [], new Set()).unexplainedDuplicates).toHaveLength(1);
    expect(check(produced.slice(0, 1), [...lines, { ...lost, t: 1900 }], [], new Set()).unexplainedDuplicates).toHaveLength(1);
    // Its acknowledgement accepted: the entry left the PEL; running it again is a duplicate whatever came after.
    expect(
      check(produced.slice(0, 1), [...lines, lost, ack('p0', 0, ['1-0'], true, 405)], [], new Set()).unexplainedDuplicates,
    ).toHaveLength(1);
  });

  it('reports, for a fault not recovered from, what each member process did (the lines the harness wrote for it), and only for such a fault', () => {
    const lines = run('p0', 0, '1-0', 'a', 1, 10, 11);
    const members = [
      'p2 (batch, chaos-group, pid 7 running); Redis: no record in chaos-group (STABLE, groupEpoch 4); it says: running, epoch -1',
    ];
    const failed: Fault = { kind: 'group-keys-lost', at: 5, failed: 'timed out after 30000 ms waiting for every group', members };
    const recovered: Fault = { kind: 'kill', target: 'p1', at: 20, recoveryMs: 100, members: ['not shown'] };
    const text = formatReport(check(produced.slice(0, 1), lines, [failed, recovered], new Set()));
    expect(text).toContain('unrecovered group-keys-lost: timed out after 30000 ms waiting for every group');
    expect(text).toContain(`  members during group-keys-lost:\n    ${members[0]}`);
    expect(text).not.toContain('not shown');
  });

  it('a fault that lasts explains redeliveries of runs begun until it ended, not after', () => {
    // zombie-dead-letter pauses its member and then replaces it: runs it began while the fault went
    // on may be run again by another member; a run begun after the fault ended may not.
    const lasting: Fault = { kind: 'zombie-dead-letter', target: 'p0', at: 100, until: 9000 };
    const during = [...run('p0', 0, '1-0', 'a', 1, 8000, 8001), ...run('p1', 0, '1-0', 'a', 1, 9500, 9501)];
    expect(check(produced.slice(0, 1), during, [lasting], new Set()).unexplainedDuplicates).toEqual([]);
    // The same fault without `until` ends at its start: the run began 7.9 s later is not its doing.
    expect(check(produced.slice(0, 1), during, [{ ...lasting, until: undefined }], new Set()).unexplainedDuplicates).toEqual([
      '0/1-0: p0 at 8000, again by p1 at 9500',
    ]);
    const after = [...run('p0', 0, '1-0', 'a', 1, 10_500, 10_501), ...run('p1', 0, '1-0', 'a', 1, 11_000, 11_001)];
    expect(check(produced.slice(0, 1), after, [lasting], new Set()).unexplainedDuplicates).toHaveLength(1);
  });

  it('excuses per-key inversions across shards around a restart that lost every key (it re-shards with no cutover), not on one shard', () => {
    const moved: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 10 },
      { id: '2-0', shard: 1, key: 'a', seq: 2, at: 20 },
    ];
    const inverted = [...run('p0', 1, '2-0', 'a', 2, 30, 31), ...run('p1', 0, '1-0', 'a', 1, 32, 33)];
    const flush: Fault = { kind: 'redis-flush-restart', at: 15, dataLoss: true };
    expect(check(moved, inverted, [flush], new Set()).orderViolations).toEqual([]);
    // Far from the restart: an inversion all the same.
    expect(check(moved, inverted, [{ ...flush, at: 60_000 }], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 0, p1)']);
    // A restart that kept the keys re-shards nothing: no excuse.
    expect(check(moved, inverted, [{ kind: 'redis-restart', at: 15 }], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 0, p1)']);
    // On one shard the library keeps order whatever Redis did.
    const sameShard: Produced[] = moved.map((p) => ({ ...p, shard: 0 }));
    const swapped = [...run('p0', 0, '2-0', 'a', 2, 30, 31), ...run('p0', 0, '1-0', 'a', 1, 32, 33)];
    expect(check(sameShard, swapped, [flush], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 0, p0)']);
  });

  it('counts entries retention trimmed before they were handled apart from entries Redis lost', () => {
    const produced: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 5 },
      { id: '2-0', shard: 0, key: 'a', seq: 2, at: 50 },
      { id: '3-0', shard: 0, key: 'a', seq: 3, at: 60 },
    ];
    const handledLast = run('p0', 0, '3-0', 'a', 3, 70, 71);
    const report = check(produced, handledLast, [], new Set(), { trimmedAway: new Set(['0/1-0', '0/3-0']) });
    // 1-0 was trimmed and never handled; 3-0 was trimmed after it was handled (retention's job); 2-0 is still there, unhandled.
    expect(report.trimmedUnhandled).toEqual(['0/1-0 (a#1) trimmed, never handled']);
    expect(report.lost).toEqual(['0/1-0 (a#1)', '0/2-0 (a#2)']);
    // Gone because Redis lost every key: Redis's loss, not a trim's.
    const flushed = check(produced, handledLast, [{ kind: 'redis-flush-restart', at: 20, dataLoss: true }], new Set(), {
      trimmedAway: new Set(['0/1-0']),
    });
    expect(flushed.trimmedUnhandled).toEqual([]);
    expect(flushed.redisLost).toEqual(['0/1-0 (a#1)']);
  });

  it("a reset that moved its group forward over undelivered entries skipped them on the operator's word: counted apart, not lost; one it did not skip is", () => {
    // The soak of 2a5536b: "to 2000 ms ago" moved shard 3, where the group was behind, from 758786-7 to 758960.
    const produced: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 5 },
      { id: '2-0', shard: 0, key: 'a', seq: 2, at: 6 },
      { id: '3-0', shard: 0, key: 'a', seq: 3, at: 7 },
      { id: '4-0', shard: 0, key: 'a', seq: 4, at: 8 },
    ];
    const forward: Fault = {
      kind: 'reset-offsets',
      at: 50,
      resets: [{ group: '', shard: 0, from: '1-0', to: '3-0', oldest: '1-0', resetAt: 50 }],
    };
    const lines = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '4-0', 'a', 4, 60, 61), ack('p0', 0, ['1-0', '4-0'], true, 62)];
    const report = check(produced, lines, [forward], new Set());
    expect(report.skippedByReset).toEqual(['0/2-0 (a#2)', '0/3-0 (a#3)']);
    expect(report.lost).toEqual([]);
    // Without the reset they are lost; and 4-0, after the reset point, is not excused.
    expect(check(produced, lines, [], new Set()).lost).toEqual(['0/2-0 (a#2)', '0/3-0 (a#3)']);
    expect(check(produced, lines.slice(0, 2), [forward], new Set()).lost).toEqual(['0/4-0 (a#4)']);
    // A reset back (to below `from`) skips nothing.
    const back: Fault = { ...forward, resets: [{ group: '', shard: 0, from: '3-0', to: '1-0', oldest: '1-0', resetAt: 50 }] };
    expect(check(produced, lines, [back], new Set()).skippedByReset).toEqual([]);
  });

  it('follows a reset of offsets: what lies after the reset point is handled again (no duplicate to explain), what is not is reported', () => {
    const produced: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 5 },
      { id: '2-0', shard: 0, key: 'a', seq: 2, at: 6 },
      { id: '3-0', shard: 0, key: 'a', seq: 3, at: 7 },
    ];
    const reset: Fault = {
      kind: 'reset-offsets',
      at: 50,
      resets: [{ group: '', shard: 0, from: '3-0', to: '1-0', oldest: '1-0', resetAt: 50 }],
    };
    const firstRuns = [
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      ...run('p0', 0, '2-0', 'a', 2, 12, 13),
      ...run('p0', 0, '3-0', 'a', 3, 14, 15),
    ];
    const again = [...run('p0', 0, '2-0', 'a', 2, 60, 61), ...run('p0', 0, '3-0', 'a', 3, 62, 63)];
    const report = check(produced, [...firstRuns, ...again], [reset], new Set());
    expect(report.notReplayed).toEqual([]);
    expect(report.duplicates).toBe(2);
    expect(report.unexplainedDuplicates).toEqual([]);
    expect(report.grantDuplicates).toEqual([]);
    // 3-0 never handled again (trimmed before the group re-read it): reported.
    const short = check(produced, [...firstRuns, ...again.slice(0, 2)], [reset], new Set());
    expect(short.notReplayed).toEqual(['0/3-0 (a#3) not handled again after the reset to 1-0']);
    // Without the reset the same runs are unexplained duplicates.
    expect(check(produced, [...firstRuns, ...again], [], new Set()).unexplainedDuplicates).toHaveLength(2);
  });

  it("an entry that failed before a reset and succeeded on the reset's re-read is no order violation; without the reset it is", () => {
    // The soak of 09bfcd1: key-33 #1282 dead-lettered, read again by a reset a minute later, succeeded after #2376.
    const { produced, reset } = twoEntriesResetToStart();
    const failed: RecordLine[] = [
      { e: 'start', t: 10, m: 'p0', s: 0, id: '1-0', k: 'a', q: 1 },
      { e: 'end', t: 11, m: 'p0', s: 0, id: '1-0', k: 'a', q: 1, ok: false },
    ];
    const lines = [
      ...failed,
      ...run('p0', 0, '2-0', 'a', 2, 12, 13),
      ...run('p0', 0, '1-0', 'a', 1, 60, 61),
      ...run('p0', 0, '2-0', 'a', 2, 62, 63),
      ack('p0', 0, ['1-0', '2-0'], true, 64),
    ];
    expect(check(produced, lines, [reset], new Set()).orderViolations).toEqual([]);
    expect(check(produced, lines, [], new Set()).orderViolations).toEqual(['a: 1 settled after 2 (shard 0, p0)']);
  });

  it('does not expect a reset to re-read what Redis lost after it (a restart without persistence)', () => {
    // The soak of 424aa44 (seed 20261201): reset-offsets to earliest at 742.6 s, then a
    // redis-flush-restart 2.6 s later took shard 6's re-read backlog with every key: 986 entries
    // reported "not handled again after the reset to 0-0" that no longer existed to be read.
    const { produced, reset } = twoEntriesResetToStart();
    const firstRuns = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '2-0', 'a', 2, 12, 13)];
    const rereadOne = run('p0', 0, '1-0', 'a', 1, 60, 61);
    const flush: Fault = { kind: 'redis-flush-restart', at: 70, dataLoss: true };
    expect(check(produced, [...firstRuns, ...rereadOne], [reset, flush], new Set()).notReplayed).toEqual([]);
    // A flush before the reset explains nothing the reset asked for afterwards.
    const earlier = check(produced, [...firstRuns, ...rereadOne], [{ ...flush, at: 40 }, reset], new Set());
    expect(earlier.notReplayed).toEqual(['0/2-0 (a#2) not handled again after the reset to 0-0']);
  });

  it('counts entries Redis lost in a restart without persistence apart from entries the library lost', () => {
    const timed: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 5 },
      { id: '2-0', shard: 0, key: 'a', seq: 2, at: 50 },
    ];
    const loss: Fault = { kind: 'redis-flush-restart', at: 20, dataLoss: true };
    const report = check(timed, [], [loss], new Set());
    expect(report.redisLost).toEqual(['0/1-0 (a#1)']);
    // Written after Redis came back empty: the library had it, so it is lost by the library.
    expect(report.lost).toEqual(['0/2-0 (a#2)']);
  });

  it('a failover explains redeliveries on the shards its master served, whoever ran them, and no others', () => {
    const twice = (s: number) => [...run('p0', s, '1-0', 'a', 1, 10, 11), ...run('p1', s, '1-0', 'a', 1, 3000, 3001)];
    const failover: Fault = { kind: 'failover', at: 100, until: 2500, shards: [0, 2] };
    const onShard = (s: number) => check([{ id: '1-0', shard: s, key: 'a', seq: 1 }], twice(s), [failover], new Set());
    expect(onShard(0)).toMatchObject({ duplicates: 1, unexplainedDuplicates: [] });
    expect(onShard(1).unexplainedDuplicates).toEqual(['1/1-0: p0 at 10, again by p1 at 3000']);
    // A slot move redelivers nothing: MIGRATE moves the stream with its group and pending entries.
    const moved = check(
      [{ id: '1-0', shard: 0, key: 'a', seq: 1 }],
      twice(0),
      [{ kind: 'slot-move', at: 100, until: 2500, shards: [0] }],
      new Set(),
    );
    expect(moved.unexplainedDuplicates).toHaveLength(1);
  });

  it('counts writes a failover lost apart only when they were confirmed without a replica, just before it, on its shards', () => {
    const timed: Produced[] = [
      { id: '1-0', shard: 0, key: 'a', seq: 1, at: 9_500 },
      { id: '2-0', shard: 0, key: 'a', seq: 2, at: 5_000 },
      { id: '3-0', shard: 1, key: 'b', seq: 1, at: 9_500 },
      { id: '4-0', shard: 0, key: 'a', seq: 3, at: 10_500 },
    ];
    const unreplicated: Fault = { kind: 'failover', at: 10_000, until: 13_000, shards: [0], unreplicated: true };
    const report = check(timed, [], [unreplicated], new Set());
    // Within REPLICATION_WINDOW_MS before the kill, on a shard of the failed master: Redis's loss.
    expect(report.redisLost).toEqual(['0/1-0 (a#1)']);
    // Older, on another master's shard, or written after: the library's.
    expect(report.lost).toEqual(['0/2-0 (a#2)', '1/3-0 (b#1)', '0/4-0 (a#3)']);
    // With waitForReplicas a confirmed write survives a failover: every missing one is a loss.
    const waited = check(timed, [], [{ ...unreplicated, unreplicated: undefined }], new Set());
    expect(waited.redisLost).toEqual([]);
    expect(waited.lost).toHaveLength(4);
  });

  it('a failed attempt retried in place is no duplicate; a dead-lettered entry is not lost', () => {
    const failed: RecordLine[] = [
      { e: 'start', t: 10, m: 'p0', s: 0, id: '1-0', k: 'a', q: 1 },
      { e: 'end', t: 11, m: 'p0', s: 0, id: '1-0', k: 'a', q: 1, ok: false },
    ];
    const deadLetters: DeadLetter[] = [{ group: '', shard: 0, id: '1-0', member: 'p0', t: 12 }];
    const lines = [
      { e: 'assigned', t: 1, m: 'p0', shards: [0], ep: 1 },
      ...failed,
      ...failed.map((l) => ({ ...l, t: l.t + 5 })),
      ack('p0', 0, ['1-0'], true, 13),
    ];
    const report = check(produced.slice(0, 1), lines, [], new Set(), { deadLetters });
    expect(report).toMatchObject({ lost: [], duplicates: 0, deadLetters: 1, unfencedDeadLetters: [] });
    expect(check(produced.slice(0, 1), lines, [], new Set()).lost).toEqual(['0/1-0 (a#1), last run by p0']);
  });

  it('finds an entry stuck at a live owner with nothing running it, not one whose handler runs or whose owner is faulted', () => {
    const sample = (t: number, ownerLive = true): PendingSample => ({
      t,
      group: '',
      shard: 0,
      owner: 'p0',
      ownerLive,
      pending: [{ id: '1-0', consumer: 'p0' }],
    });
    const samples = [0, 500, 1000, 1500, 2000, 2500, 3000, 3500].map((t) => sample(t));
    // Forgotten on a quiet shard: past the longer bound.
    expect(check([], [], [], new Set(), { pendingSamples: samples, stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck).toEqual([
      'shard 0 1-0 pending at p0 for 3500 ms with nothing running it',
    ]);
    // Skipped: a later entry of the shard ran meanwhile: past the shorter bound.
    const later = run('p0', 0, '2-0', 'a', 2, 100, 101);
    expect(
      check([], later, [], new Set(), { pendingSamples: samples.slice(0, 5), stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck,
    ).toEqual(['shard 0 1-0 pending at p0 for 2000 ms with nothing running it while later entries ran']);
    // Queued behind an earlier entry still being retried (no later entry ran): only the longer bound.
    const earlier = run('p0', 0, '0-5', 'a', 0, 100, 101);
    expect(
      check([], earlier, [], new Set(), { pendingSamples: samples.slice(0, 5), stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck,
    ).toEqual([]);
    // A backlog worked through in order (earlier entries of the shard keep starting): not stuck.
    const backlog = [0, 600, 1200, 1800, 2400, 3000].flatMap((t, i) => run('p0', 0, `0-${i + 1}`, 'a', i, t, t + 1));
    expect(check([], backlog, [], new Set(), { pendingSamples: samples, stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck).toEqual([]);
    // Queued long in a backlog, then run: pending until its ack lands while the next entry starts
    // (the old read-path branch's short-tier "stuck"): counted from its run's end, not stuck.
    const ranLate = [...run('p0', 0, '1-0', 'a', 1, 2990, 2995), ...run('p0', 0, '2-0', 'a', 2, 2996, 2997)];
    const untilAck = [...samples.slice(0, 6), sample(3010)];
    expect(check([], ranLate, [], new Set(), { pendingSamples: untilAck, stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck).toEqual([]);
    // Run early, then left pending (its ack given up on) while later entries ran: still stuck.
    const ranEarly = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '2-0', 'a', 2, 100, 101)];
    expect(
      check([], ranEarly, [], new Set(), { pendingSamples: samples.slice(0, 5), stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck,
    ).toEqual(['shard 0 1-0 pending at p0 for 1989 ms with nothing running it while later entries ran']);
    // Its handler runs the whole time (a long handler): not stuck.
    const running = run('p0', 0, '1-0', 'a', 1, -1, 4000);
    expect(check([], running, [], new Set(), { pendingSamples: samples, stuckAfterMs: 1500, quietStuckAfterMs: 3000 }).stuck).toEqual([]);
    // The owner is paused or partitioned: its shard moves on by expiry, not a stuck entry.
    expect(
      check([], [], [], new Set(), { pendingSamples: samples.map((s) => ({ ...s, ownerLive: false })), stuckAfterMs: 1500 }).stuck,
    ).toEqual([]);
    // Pending at another consumer (a zombie's late read) is the sweep's business, judged by "lost".
    const elsewhere = samples.map((s) => ({ ...s, pending: [{ id: '1-0', consumer: 'zombie' }] }));
    expect(check([], [], [], new Set(), { pendingSamples: elsewhere, stuckAfterMs: 1500 }).stuck).toEqual([]);
  });

  it('finds dead letters written by a member that no longer owned the shard, or also acknowledged by another member', () => {
    const assigned = (m: string, t: number, ep: number): RecordLine => ({ e: 'assigned', t, m, shards: [0], ep });
    const zombieLate: DeadLetter = { group: '', shard: 0, id: '1-0', member: 'zombie', t: 5040 };
    const lines = [
      assigned('zombie', 1, 1),
      ...run('zombie', 0, '1-0', 'a', 1, 10, 11),
      assigned('heir', 20, 2),
      ...run('heir', 0, '1-0', 'a', 1, 21, 22),
      ack('heir', 0, ['1-0'], true, 5023),
    ];
    expect(check(produced.slice(0, 1), lines, [], new Set(), { deadLetters: [zombieLate] }).unfencedDeadLetters).toEqual([
      'shard 0 1-0 dead-lettered by zombie, also acknowledged by heir',
    ]);
    // Another entry of the shard acknowledged by the heir before the zombie's write: the shard had moved on.
    const other: DeadLetter = { group: '', shard: 0, id: '2-0', member: 'zombie', t: 5040 };
    expect(check(produced.slice(0, 2), lines, [], new Set(), { deadLetters: [other] }).unfencedDeadLetters).toEqual([
      'shard 0 2-0 dead-lettered by zombie after heir owned the shard (its acknowledgement was accepted at 5023)',
    ]);
    // Never granted the shard at all.
    const stranger: DeadLetter = { group: '', shard: 0, id: '2-0', member: 'p9', t: 5040 };
    expect(check(produced.slice(0, 2), lines, [], new Set(), { deadLetters: [stranger] }).unfencedDeadLetters).toEqual([
      'shard 0 2-0 dead-lettered by p9, which was never granted the shard before writing it',
    ]);
    // The owner of the time, nobody else acknowledged it: fine.
    const owners: DeadLetter = { group: '', shard: 0, id: '2-0', member: 'heir', t: 5040 };
    expect(check(produced.slice(0, 2), lines, [], new Set(), { deadLetters: [owners] }).unfencedDeadLetters).toEqual([]);
  });

  it('follows a reset of offsets for dead letters: an entry dead-lettered, then re-read and acknowledged by another member after a reset, is no unfenced dead letter; the same without the reset is', () => {
    const assigned = (m: string, t: number, ep: number): RecordLine => ({ e: 'assigned', t, m, shards: [0], ep });
    // p0 dead-letters 1-0 at 5000 (its dead-letter write counts as its ack); at 6000 the group's
    // offsets go back to 0-0 and p1, the shard's owner since 5500, handles 1-0 again and acknowledges it.
    const lines = [
      assigned('p0', 1, 1),
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      ack('p0', 0, ['1-0'], true, 5000),
      assigned('p1', 5500, 2),
      ...run('p1', 0, '1-0', 'a', 1, 6100, 6101),
      ack('p1', 0, ['1-0'], true, 6102),
    ];
    const letter: DeadLetter = { group: '', shard: 0, id: '1-0', member: 'p0', t: 5000 };
    const reset: Fault = {
      kind: 'reset-offsets',
      at: 6000,
      resets: [{ group: '', shard: 0, from: '2-0', to: '0-0', oldest: '1-0', resetAt: 6000 }],
    };
    expect(check(produced.slice(0, 1), lines, [reset], new Set(), { deadLetters: [letter] }).unfencedDeadLetters).toEqual([]);
    expect(check(produced.slice(0, 1), lines, [], new Set(), { deadLetters: [letter] }).unfencedDeadLetters).toEqual([
      'shard 0 1-0 dead-lettered by p0, also acknowledged by p1',
    ]);
    // The other way round: acknowledged by p0 before the reset, dead-lettered by p1 after it (a
    // failing spell then): two lives of the entry, no unfenced dead letter either.
    const acknowledgedFirst = [
      assigned('p0', 1, 1),
      ack('p0', 0, ['1-0'], true, 20),
      assigned('p1', 5500, 2),
      ack('p1', 0, ['1-0'], true, 6200),
    ];
    const after: DeadLetter = { group: '', shard: 0, id: '1-0', member: 'p1', t: 6200 };
    expect(check(produced.slice(0, 1), acknowledgedFirst, [reset], new Set(), { deadLetters: [after] }).unfencedDeadLetters).toEqual([]);
    // Reset while p0 still held it (its first attempt before the reset, its dead letter after, both
    // before p1 re-read it): the dead letter is of the life before the reset.
    const heldOverReset = [
      assigned('p0', 1, 1),
      ...run('p0', 0, '1-0', 'a', 1, 5900, 5901),
      ...run('p0', 0, '1-0', 'a', 1, 6050, 6051),
      assigned('p1', 6500, 2),
      ...run('p1', 0, '1-0', 'a', 1, 6600, 6601),
      ack('p1', 0, ['1-0'], true, 6602),
    ];
    const heldLetter: DeadLetter = { ...letter, t: 6052 };
    const withAttempts = heldOverReset.map((line) => (line.e === 'start' ? { ...line, n: line.t === 6050 ? 2 : 1 } : line));
    expect(check(produced.slice(0, 1), withAttempts, [reset], new Set(), { deadLetters: [heldLetter] }).unfencedDeadLetters).toEqual([]);
    expect(check(produced.slice(0, 1), withAttempts, [], new Set(), { deadLetters: [heldLetter] }).unfencedDeadLetters).toEqual([
      'shard 0 1-0 dead-lettered by p0, also acknowledged by p1',
    ]);
    // Pending at p0 across the reset, its first attempt after it (its queue slow), dead-lettered; then
    // p1 is delivered it afresh (count 1) by the re-read and acknowledges it: two lives again.
    const pendingAcross = [
      assigned('p0', 1, 1),
      ...run('p0', 0, '1-0', 'a', 1, 6050, 6051),
      assigned('p1', 6500, 2),
      ...run('p1', 0, '1-0', 'a', 1, 8000, 8001),
      ack('p1', 0, ['1-0'], true, 8002),
    ].map((line) => (line.e === 'start' ? { ...line, n: 1, dc: 1 } : line));
    const acrossLetter: DeadLetter = { ...letter, t: 6052 };
    expect(check(produced.slice(0, 1), pendingAcross, [reset], new Set(), { deadLetters: [acrossLetter] }).unfencedDeadLetters).toEqual([]);
    // Delivered to p1 by a claim (count 2), not afresh: the same life, unfenced.
    const claimed = pendingAcross.map((line) => (line.e === 'start' && line.m === 'p1' ? { ...line, dc: 2 } : line));
    expect(check(produced.slice(0, 1), claimed, [reset], new Set(), { deadLetters: [acrossLetter] }).unfencedDeadLetters).toEqual([
      'shard 0 1-0 dead-lettered by p0, also acknowledged by p1',
    ]);
    // A reset that did not move the group back over the entry (its point is past it) separates nothing.
    const past: Fault = { ...reset, resets: [{ ...reset.resets![0], to: '1-0' }] };
    expect(check(produced.slice(0, 1), lines, [past], new Set(), { deadLetters: [letter] }).unfencedDeadLetters).toEqual([
      'shard 0 1-0 dead-lettered by p0, also acknowledged by p1',
    ]);
  });

  it("a paused member's ack, recorded once it runs again, counts from when the pause began (the cluster soak's pauses outlast LATE_RECORD_MS; 0086aee)", () => {
    const assigned = (m: string, t: number): RecordLine => ({ e: 'assigned', t, m, shards: [0], ep: m === 'paused' ? 1 : 2 });
    // paused owns shard 0, is stopped at 1000 and resumed at 8000; heir gets the shard at 4000 and
    // dead-letters 2-0 at 9000. paused's ack of 1-0 ran before the pause, its reply was read at 8000.
    const lines = [assigned('paused', 1), assigned('heir', 4000), ack('paused', 0, ['1-0'], true, 8000)];
    const letter: DeadLetter = { group: '', shard: 0, id: '2-0', member: 'heir', t: 9000 };
    const pause: Fault = { kind: 'pause', target: 'paused', at: 1000, until: 8000 };
    expect(check(produced.slice(0, 2), lines, [pause], new Set(), { deadLetters: [letter] }).unfencedDeadLetters).toEqual([]);
    const unfenced = ['shard 0 2-0 dead-lettered by heir after paused owned the shard (its acknowledgement was accepted at 8000)'];
    expect(check(produced.slice(0, 2), lines, [], new Set(), { deadLetters: [letter] }).unfencedDeadLetters).toEqual(unfenced);
    // Recorded long after it ran again: that ack did run after the heir's grant.
    const later = [assigned('paused', 1), assigned('heir', 4000), ack('paused', 0, ['1-0'], true, 11_500)];
    const lateLetter = { ...letter, t: 12_000 };
    expect(check(produced.slice(0, 2), later, [pause], new Set(), { deadLetters: [lateLetter] }).unfencedDeadLetters).toEqual([
      'shard 0 2-0 dead-lettered by heir after paused owned the shard (its acknowledgement was accepted at 11500)',
    ]);
    // Under a grant it got once it ran again (the shard came back to it): that ack ran after the
    // heir's grant too, whenever it was recorded (seen in the second cluster run: moved back, it hid nothing but was wrong).
    const regranted = [
      assigned('paused', 1),
      assigned('heir', 4000),
      { e: 'assigned', t: 8100, m: 'paused', shards: [0], ep: 3 },
      { ...ack('paused', 0, ['1-0'], true, 8200), ge: 3 },
    ];
    const afterRegrant = { ...letter, member: 'heir', t: 9000 };
    expect(check(produced.slice(0, 2), regranted, [pause], new Set(), { deadLetters: [afterRegrant] }).unfencedDeadLetters).toEqual([
      'shard 0 2-0 dead-lettered by heir after paused owned the shard (its acknowledgement was accepted at 8200)',
    ]);
  });

  it('finds an entry run to success twice under one grant, not once per grant', () => {
    const assigned = (t: number, ep: number): RecordLine => ({ e: 'assigned', t, m: 'p0', shards: [0], ep });
    const acked = (t: number, ge: number): RecordLine => ({ ...ack('p0', 0, ['1-0'], true, t), ge });
    const twice = [assigned(1, 3), ...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '1-0', 'a', 1, 12, 13), acked(14, 3)];
    expect(check(produced.slice(0, 1), twice, [], new Set()).grantDuplicates).toEqual([
      'shard 0 1-0 run to success twice by p0 under grant 3 (assigned at 1)',
    ]);
    const regranted = [
      assigned(1, 3),
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      assigned(12, 5),
      ...run('p0', 0, '1-0', 'a', 1, 13, 14),
      acked(15, 5),
    ];
    expect(check(produced.slice(0, 1), regranted, [], new Set()).grantDuplicates).toEqual([]);
  });

  it('tells apart two grants of one epoch in a recreated group (epochs start again): a grant is the assigned record that began it', () => {
    // CI, lane 2: "shard 1 ... run to success twice by p2 under grant 3". p0 ran the entry under its
    // grant 3; the group's keys were lost (its ack was refused: the fence had moved on); the group,
    // recreated, counted epochs from 1 again and granted p0 the shard at epoch 3 once more, and p0 ran
    // the pending entry again, acknowledged this time. Two grants, one run each.
    const assigned = (t: number, ep: number): RecordLine => ({ e: 'assigned', t, m: 'p0', shards: [0], ep });
    const acked = (t: number, ge: number, ok: boolean): RecordLine => ({ ...ack('p0', 0, ['1-0'], ok, t), ge });
    const lost: Fault = { kind: 'group-keys-lost', at: 15 };
    const twoLives = [
      assigned(1, 3),
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      acked(12, 3, false),
      assigned(20, 1),
      assigned(30, 3),
      ...run('p0', 0, '1-0', 'a', 1, 31, 32),
      acked(33, 3, true),
    ];
    const report = check(produced.slice(0, 1), twoLives, [lost], new Set());
    expect(report).toMatchObject({ grantDuplicates: [], duplicates: 1, unexplainedDuplicates: [], lost: [] });
    // Only the second life's run counts as acknowledged (it matters for overlaps as well).
    expect(collectRuns(twoLives).map((r) => [r.grant, r.grantAt, r.acked])).toEqual([
      [3, 1, false],
      [3, 30, true],
    ]);
    // The same the other way round: the old life's ack was accepted, the new life's run was not acknowledged.
    const firstAcked = [
      assigned(1, 3),
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      acked(12, 3, true),
      assigned(30, 3),
      ...run('p0', 0, '1-0', 'a', 1, 31, 32),
    ];
    expect(collectRuns(firstAcked).map((r) => r.acked)).toEqual([true, false]);
    // Within one assigned record a second accepted run is still caught, whatever came before.
    const twiceInSecondLife = [...twoLives, ...run('p0', 0, '1-0', 'a', 1, 34, 35), acked(36, 3, true)];
    expect(check(produced.slice(0, 1), twiceInSecondLife, [lost], new Set()).grantDuplicates).toEqual([
      'shard 0 1-0 run to success twice by p0 under grant 3 (assigned at 30)',
    ]);
  });

  it('checks per-key order and loss for every consumer group, and reports faults that never recovered', () => {
    const g = (lines: RecordLine[], group: string) => lines.map((l) => ({ ...l, g: group }));
    const good = g([...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '2-0', 'a', 2, 12, 13)], 'old');
    const swapped = g([...run('p1', 0, '2-0', 'a', 2, 10, 11), ...run('p1', 0, '1-0', 'a', 1, 12, 13)], 'late');
    const report = check(
      produced.slice(0, 2),
      [...good, ...swapped],
      [{ kind: 'duplicate-id', at: 1, failed: 'never refused' }],
      new Set(),
      { groups: ['old', 'late', 'third'] },
    );
    expect(report.orderViolations).toEqual(['late: a: 1 after 2 (shard 0, p1)']);
    expect(report.lost).toEqual(['third: 0/1-0 (a#1)', 'third: 0/2-0 (a#2)']);
    expect(report.unrecovered).toEqual(['duplicate-id: never refused']);
    // A group created after deleteDrainedShards cannot read what was deleted: not lost for it.
    const later = check(produced.slice(0, 2), good, [], new Set(), {
      groups: ['old', 'third'],
      unreadable: new Map([['third', new Set(['0/1-0', '0/2-0'])]]),
    });
    expect(later.lost).toEqual([]);
  });

  it('finds a key written twice (a partial batch sent again whole), not an entry handled twice', () => {
    const copies = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p0', 0, '2-0', 'a', 2, 12, 13), ...run('p0', 0, '3-0', 'a', 1, 14, 15)];
    expect(check(produced.slice(0, 2), copies, [], new Set()).writtenTwice).toEqual(['a#1 in 0/1-0 and 0/3-0']);
    const redelivered = [...run('p0', 0, '1-0', 'a', 1, 10, 11), ...run('p1', 0, '1-0', 'a', 1, 20, 21)];
    expect(check(produced.slice(0, 1), redelivered, [{ kind: 'kill', target: 'p0', at: 15 }], new Set()).writtenTwice).toEqual([]);
    // Sent again after the reply was lost: at-least-once allows the copy.
    expect(check(produced.slice(0, 2), copies, [], new Set(), { mayBeTwice: new Set(['a#1']) }).writtenTwice).toEqual([]);
    // Written on either side of a loss of every key (the write log lost with it): a resend no log could recognise.
    const flush: Fault = { kind: 'redis-flush-restart', at: 2, dataLoss: true };
    expect(check(produced.slice(0, 2), copies, [flush], new Set()).writtenTwice).toEqual([]);
    expect(check(produced.slice(0, 2), copies, [{ ...flush, at: 5 }], new Set()).writtenTwice).toEqual(['a#1 in 0/1-0 and 0/3-0']);
  });

  it("reports per member kind: each kind's share of the work and the problem lines naming its members (a static member's instances are its own)", () => {
    const lines: RecordLine[] = [
      ...run('p1', 0, '1-0', 'a', 1, 10, 11),
      ack('p1', 0, ['1-0'], true, 12),
      // p1's next instance (h: p1-r5) runs 2-0 while p31 (a plain member) runs 3-0 alongside it, twice.
      ...run('p1', 0, '2-0', 'a', 2, 20, 30).map((l) => ({ ...l, h: 'p1-r5' })),
      ...run('p31', 0, '2-0', 'a', 2, 25, 26),
      { ...ack('p1', 0, ['2-0'], true, 31), h: 'p1-r5' },
      ...run('p31', 1, '3-0', 'b', 1, 40, 41),
      ack('p31', 1, ['3-0'], true, 42),
    ];
    const report = check(produced, lines, [], new Set(), {
      memberKinds: new Map([
        ['p1', 'static'],
        ['p31', 'plain'],
      ]),
    });
    expect(report.overlaps).toEqual(['shard 0: p1-r5 2-0 and p31 2-0']);
    const byKind = Object.fromEntries(report.kinds.map((k) => [k.kind, k]));
    expect(byKind.static).toMatchObject({ members: ['p1'], processes: 2, runs: 2, acknowledged: 2 });
    expect(byKind.plain).toMatchObject({ members: ['p31'], processes: 1, runs: 2, acknowledged: 1 });
    // Both kinds are named by the overlap and by the unexplained duplicate it made.
    const lines2 = ['shard 0: p1-r5 2-0 and p31 2-0', '0/2-0: p1 at 20, again by p31 at 25'];
    expect(byKind.static.problems).toEqual(lines2);
    expect(byKind.plain.problems).toEqual(lines2);
    // "p1" is not named by a line about p31 alone.
    const alone = check(
      produced,
      lines.filter((l) => l.m === 'p31'),
      [],
      new Set(),
      {
        memberKinds: new Map([
          ['p1', 'static'],
          ['p31', 'plain'],
        ]),
      },
    );
    expect(alone.kinds.find((k) => k.kind === 'static')?.problems).toEqual([]);
  });

  describe('deferred retries and delayed entries', () => {
    /** One handler call of group `g` (a copy has an id of its own, the key and sequence number of its original). */
    const call = (g: string, m: string, s: number, id: string, k: string, q: number, start: number, ok = true): RecordLine[] => [
      { e: 'start', t: start, g, m, s, id, k, q },
      { e: 'end', t: start + 1, g, m, s, id, k, q, ok },
    ];
    const acked = (g: string, m: string, s: number, ids: string[], t: number): RecordLine => ({ e: 'ack', t, g, m, s, ids, ok: true });
    const deferring = { groups: ['d'], deferringGroups: ['d'] };
    // a#1 fails and is deferred (acknowledged as it goes into the schedule), a#2 is parked behind
    // it; both come back as copies (7-0, 8-0) and run in order.
    const inOrder = [
      ...call('d', 'p0', 0, '1-0', 'a', 1, 10, false),
      { e: 'deferred', t: 12, g: 'd', m: 'p0', s: 0, id: '1-0', n: 1, due: 200 },
      { e: 'parked', t: 13, g: 'd', m: 'p0', s: 0, id: '2-0', n: 0, due: 200 },
      ...call('d', 'p0', 0, '7-0', 'a', 1, 210),
      ...call('d', 'p0', 0, '8-0', 'a', 2, 212),
      acked('d', 'p0', 0, ['7-0', '8-0'], 215),
    ];

    it('maps a deferred entry and its parked key to their copies: not lost, not written twice, in key order', () => {
      const report = check(produced.slice(0, 2), inOrder, [], new Set(), deferring);
      expect(report).toMatchObject({
        handled: 2,
        acknowledged: 2,
        lost: [],
        orderViolations: [],
        writtenTwice: [],
        unexplainedDuplicates: [],
      });
      expect(report.deferrals).toEqual({ deferred: 1, parked: 1 });
    });

    it("finds a deferred entry whose copy ran after its key's later entry (the later one not parked)", () => {
      const outOfOrder = [
        ...call('d', 'p0', 0, '1-0', 'a', 1, 10, false),
        { e: 'deferred', t: 12, g: 'd', m: 'p0', s: 0, id: '1-0', n: 1, due: 200 },
        ...call('d', 'p0', 0, '2-0', 'a', 2, 14),
        ...call('d', 'p0', 0, '7-0', 'a', 1, 210),
        acked('d', 'p0', 0, ['2-0', '7-0'], 215),
      ];
      const report = check(produced.slice(0, 2), outOfOrder, [], new Set(), deferring);
      expect(report.orderViolations).toEqual(['d: a: 1 settled after 2 (shard 0, p0)']);
      expect(report.lost).toEqual([]);
    });

    it('finds a deferred entry lost (its copy never ran) or left unacknowledged, and a key#seq run to success from two entries', () => {
      const copyNeverRan = inOrder.filter((l) => l.id !== '7-0' || l.e === 'ack');
      expect(check(produced.slice(0, 2), copyNeverRan, [], new Set(), deferring).lost).toEqual(['d: 0/1-0 (a#1), last run by p0']);
      expect(check(produced.slice(0, 2), inOrder, [], new Set(['d/0/8-0']), deferring).lost).toEqual(['d: 0/2-0 (a#2) not acknowledged']);
      const twice = [...inOrder, ...call('d', 'p0', 0, '9-0', 'a', 2, 220), acked('d', 'p0', 0, ['9-0'], 225)];
      expect(check(produced.slice(0, 2), twice, [], new Set(), deferring).writtenTwice).toEqual(['d: a#2 in 0/8-0 and 0/9-0']);
    });

    // Delayed: a#1 due at 1000, its id the schedule's; released as 1001-0.
    const delayed: Produced[] = [{ id: 's0000000000000001', shard: 0, key: 'a', seq: 1, dueAt: 1000 }];

    it('finds a delayed entry released before its due time (its stream id), not one released after it', () => {
      const onTime = [...run('p0', 0, '1001-0', 'a', 1, 1003, 1004), ack('p0', 0, ['1001-0'], true, 1005)];
      const report = check(delayed, onTime, [], new Set());
      expect(report).toMatchObject({
        handled: 1,
        acknowledged: 1,
        lost: [],
        early: [],
        delayed: { count: 1, releaseLateMaxMs: 1, lateMaxMs: 3 },
      });
      const releasedEarly = [...run('p0', 0, '990-0', 'a', 1, 1003, 1004), ack('p0', 0, ['990-0'], true, 1005)];
      expect(check(delayed, releasedEarly, [], new Set()).early).toEqual(['a#1 (0/s0000000000000001) released 10 ms before its due time']);
    });

    it('excuses delayed entries of one schedule released into two shards around an unordered growth (one due before the switch, released late into the old shard; one after it, moved), not into one', () => {
      const twoDelayed: Produced[] = [
        { id: 's0000000000000001', shard: 4, key: 'a', seq: 1, at: 100, dueAt: 250 },
        { id: 's0000000000000002', shard: 4, key: 'a', seq: 2, at: 200, dueAt: 350 },
      ];
      const grow: Fault = { kind: 'grow-unordered', at: 300 };
      const moved = [...run('p1', 8, '9-0', 'a', 2, 360, 361), ...run('p0', 4, '8-0', 'a', 1, 700, 701)];
      expect(check(twoDelayed, moved, [grow], new Set()).orderViolations).toEqual([]);
      const oneShard = [...run('p0', 4, '9-0', 'a', 2, 360, 361), ...run('p0', 4, '8-0', 'a', 1, 700, 701)];
      expect(check(twoDelayed, oneShard, [grow], new Set()).orderViolations).toEqual(['a: 1 after 2 (shard 4, p0)']);
    });

    it('finds a delayed entry lost: never released, or released and left unacknowledged', () => {
      expect(check(delayed, [], [], new Set()).lost).toEqual(['0/s0000000000000001 (a#1)']);
      const unacknowledged = run('p0', 0, '1001-0', 'a', 1, 1003, 1004);
      expect(check(delayed, unacknowledged, [], new Set(['0/1001-0'])).lost).toEqual(['0/s0000000000000001 (a#1) not acknowledged']);
    });
  });

  describe('dead letters replayed and purged by the soak actors', () => {
    // 1-0 (a#1) fails for good on shard 0 and is dead-lettered by p0 as ref 0/100-0; a replay writes
    // it again as 0/5-0 (a#1 once more, after a#2), which p0 handles.
    const letter: DeadLetter = { group: '', ref: '0/100-0', shard: 0, id: '1-0', member: 'p0', t: 100 };
    const original = [
      ...run('p0', 0, '1-0', 'a', 1, 10, 11),
      ...run('p0', 0, '2-0', 'a', 2, 12, 13),
      ack('p0', 0, ['1-0', '2-0'], true, 14),
    ];
    const replayRun = (id: string, start: number): RecordLine[] =>
      run('p0', 0, id, 'a', 1, start, start + 1).map((l) => (l.e === 'start' ? { ...l, rp: '0/100-0', rg: '' } : l));
    const operations = (asked: 'replay' | 'purge', answered?: string) => ({
      seen: [letter],
      replayAsked: new Set(asked === 'replay' ? [' 0/100-0'] : []),
      purgeAsked: new Set(asked === 'purge' ? [' 0/100-0'] : []),
      answered: new Map(answered ? [[' 0/100-0', answered]] : []),
    });
    const outcomes = (lines: RecordLine[], extras: Parameters<typeof check>[4], open = new Set<string>()) =>
      check(produced.slice(0, 2), lines, [], open, extras);

    it('replayed once, handled, its dead letter gone: no problem, and the replay is no second write of a#1 nor an order violation', () => {
      const lines = [...original, ...replayRun('5-0', 200), ack('p0', 0, ['5-0'], true, 202)];
      const report = outcomes(lines, { deadLetters: [], deadLetterOperations: operations('replay', '0/5-0') });
      expect(report.deadLetterOutcomes).toEqual([]);
      expect(report.writtenTwice).toEqual([]);
      expect(report.orderViolations).toEqual([]);
      // The dead letter the actor saw (gone from Redis now) still accounts for 1-0: not lost.
      expect(report.lost).toEqual([]);
    });

    it("another group's copy of the replay (a deferring group parked or deferred it: a new id, the replay's headers) is no second replay", () => {
      const copy = (id: string, start: number): RecordLine[] => replayRun(id, start).map((l) => ({ ...l, g: 'd', m: 'p9' }));
      const lines = [
        ...original,
        ...replayRun('5-0', 200),
        ack('p0', 0, ['5-0'], true, 202),
        ...copy('7-0', 400),
        { e: 'ack', t: 402, g: 'd', m: 'p9', s: 0, ids: ['7-0'], ok: true } as RecordLine,
      ];
      const report = outcomes(lines, { deadLetters: [], groups: ['', 'd'], deadLetterOperations: operations('replay', '0/5-0') });
      expect(report.deadLetterOutcomes).toEqual([]);
    });

    it('finds a dead letter replayed twice (a retry that did not find the earlier write), one gone without a replay, and one listed although replayed', () => {
      const twice = [...original, ...replayRun('5-0', 200), ...replayRun('6-0', 300), ack('p0', 0, ['5-0', '6-0'], true, 302)];
      expect(outcomes(twice, { deadLetters: [], deadLetterOperations: operations('replay', '0/6-0') }).deadLetterOutcomes).toEqual([
        ' 0/100-0 replayed 2 times: 0/5-0, 0/6-0',
      ]);
      expect(outcomes(original, { deadLetters: [], deadLetterOperations: operations('replay') }).deadLetterOutcomes).toEqual([
        ' 0/100-0 gone, neither replayed nor purged (a replay was asked for)',
      ]);
      const listed = [...original, ...replayRun('5-0', 200), ack('p0', 0, ['5-0'], true, 202)];
      expect(outcomes(listed, { deadLetters: [letter], deadLetterOperations: operations('replay') }).deadLetterOutcomes).toEqual([
        ' 0/100-0 still listed, yet replayed to 0/5-0',
      ]);
      // Still listed and never replayed (its replay kept failing, or nobody asked): fine.
      expect(outcomes(original, { deadLetters: [letter], deadLetterOperations: operations('replay') }).deadLetterOutcomes).toEqual([]);
    });

    it('finds a replay its group never handled or acknowledged, and a replay that answered an entry that is not there', () => {
      const found: ReplayWrite = { group: '', ref: '0/100-0', shard: 0, id: '5-0' };
      expect(
        outcomes(original, { deadLetters: [], deadLetterOperations: operations('replay', '0/5-0'), replayWrites: [found] })
          .deadLetterOutcomes,
      ).toEqual([' 0/100-0: its replay 0/5-0 never handled by ']);
      const unacknowledged = [...original, ...replayRun('5-0', 200)];
      expect(
        outcomes(unacknowledged, { deadLetters: [], deadLetterOperations: operations('replay', '0/5-0') }, new Set(['0/5-0']))
          .deadLetterOutcomes,
      ).toEqual([' 0/100-0: its replay 0/5-0 handled but not acknowledged by ']);
      const lines = [...original, ...replayRun('5-0', 200), ack('p0', 0, ['5-0'], true, 202)];
      expect(outcomes(lines, { deadLetters: [], deadLetterOperations: operations('replay', '0/7-0') }).deadLetterOutcomes).toEqual([
        ' 0/100-0: its replay answered 0/7-0, where no replay of it is',
      ]);
    });

    it('a purged dead letter is gone and replayed at most once (a replay in flight may land once); one Redis lost is excused', () => {
      expect(outcomes(original, { deadLetters: [], deadLetterOperations: operations('purge') }).deadLetterOutcomes).toEqual([]);
      const landedOnce = [...original, ...replayRun('5-0', 200), ack('p0', 0, ['5-0'], true, 202)];
      expect(outcomes(landedOnce, { deadLetters: [], deadLetterOperations: operations('purge') }).deadLetterOutcomes).toEqual([]);
      expect(outcomes(original, { deadLetters: [letter], deadLetterOperations: operations('purge') }).deadLetterOutcomes).toEqual([
        ' 0/100-0 still listed, yet purged',
      ]);
      const flushed: Fault = { kind: 'redis-flush-restart', at: 150, dataLoss: true };
      expect(
        check(produced.slice(0, 2), original, [flushed], new Set(), { deadLetters: [], deadLetterOperations: operations('replay') })
          .deadLetterOutcomes,
      ).toEqual([]);
    });
  });
});

describe('record tail (what the harness polls while a fault waits)', () => {
  it('reads only what was appended since it was made, whole lines only, a line cut mid-write on the next read', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const { RecordTail } = await import('./record-tail');
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-tail-')), 'p0.jsonl');
    fs.writeFileSync(file, `${JSON.stringify({ e: 'old', t: 1, m: 'p0' })}\n`);
    const tail = new RecordTail(file);
    expect(tail.read()).toEqual([]);
    const line = JSON.stringify({ e: 'start', t: 2, m: 'p0', msg: 'naïve' });
    fs.appendFileSync(file, `${line}\n${line.slice(0, 20)}`);
    expect(tail.read().map((l) => l.e)).toEqual(['start']);
    fs.appendFileSync(file, `${line.slice(20)}\n`);
    expect(tail.read().map((l) => [l.e, l.msg])).toEqual([
      ['start', 'naïve'],
      ['start', 'naïve'],
    ]);
    expect(new RecordTail(file, true).read().map((l) => l.e)).toEqual(['old', 'start', 'start']);
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  });

  it('readRecordsSince reads a long file from its end: every line written since, whole, across chunk boundaries, nothing older than the slack', async () => {
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const { readRecordsSince } = await import('./harness-tools');
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-since-')), 'p0.jsonl');
    // About 5 MB: 60,000 lines one ms apart, multi-byte text so that a chunk boundary cuts a character.
    const lines = Array.from({ length: 60_000 }, (_, i) =>
      JSON.stringify({ e: 'start', t: i, m: 'p0', msg: `naïve ${'x'.repeat(60)} ${i}` }),
    );
    fs.writeFileSync(file, `${lines.join('\n')}\n${lines[0]!.slice(0, 15)}`);
    const since = await readRecordsSince(file, 52_000);
    expect(since.map((l) => l.t)).toEqual(Array.from({ length: 8_000 }, (_, i) => 52_000 + i));
    expect(since.every((l) => l.msg?.startsWith('naïve'))).toBe(true);
    expect((await readRecordsSince(file, 0)).length).toBe(60_000);
    expect(await readRecordsSince(path.join(path.dirname(file), 'none.jsonl'), 0)).toEqual([]);
    fs.rmSync(path.dirname(file), { recursive: true, force: true });
  });
});

describe('fault kinds per target (single node, Redis Cluster)', () => {
  it('runs failover and slot-move on a cluster only, and the kinds that need a proxy or the single server on the single node only', () => {
    const onCluster = faultKindsOn('cluster');
    expect(onCluster).toEqual(
      expect.arrayContaining(['failover', 'slot-move', 'kill', 'pause', 'grow-ordered', 'new-group', 'group-keys-lost']),
    );
    for (const kind of ['partition', 'reset', 'lost-ack', 'redis-restart', 'dead-letter-oom', 'stale-producer', 'unsafe-lease'] as const)
      expect(onCluster).not.toContain(kind);
    // The single-node short tier and soak never deal a cluster kind.
    expect(ALL_FAULT_KINDS).not.toContain('failover');
    expect(ALL_FAULT_KINDS).not.toContain('slot-move');
    expect(selectedFaultKinds('all', undefined, 'cluster')).toEqual(onCluster);
    expect(selectedFaultKinds('failover,kill', undefined, 'cluster')).toEqual(['failover', 'kill']);
  });

  it('refuses a kind that does not run on the chosen target, naming it and what runs there', () => {
    expect(() => selectedFaultKinds('kill,partition', undefined, 'cluster')).toThrow(
      /RSC_CHAOS_FAULTS: fault kind "partition" does not run on a cluster; there: all, kill/,
    );
    expect(() => selectedFaultKinds('failover')).toThrow(/fault kind "failover" does not run on a single redis-server/);
    expect(() => selectedFaultKinds('nonsense', undefined, 'cluster')).toThrow(/unknown fault kind "nonsense"/);
  });
});
