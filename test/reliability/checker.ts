/**
 * The reliability checker: from what the producer wrote, what every member process recorded and the
 * faults the driver injected, it tells whether the product's promises held (SPEC section 1). Pure.
 */

export interface Produced {
  id: string;
  shard: number;
  key: string;
  seq: number;
}

/** One line of a member process's record file (packages/core/src/testing/member-process.ts). */
export interface RecordLine {
  e: string;
  t: number;
  m: string;
  ep?: number;
  s?: number;
  id?: string;
  k?: string;
  q?: number;
  dc?: number;
  ids?: string[];
  ok?: boolean;
  ge?: number;
}

export type FaultKind = 'kill' | 'pause' | 'graceful' | 'join' | 'redis-restart' | 'partition' | 'reset';

export interface Fault {
  kind: FaultKind;
  /** The member process it hit (none for a Redis restart). */
  target?: string;
  at: number;
  /** When the group was STABLE again with every shard owned by a running member (ms after `at`). */
  recoveryMs?: number;
}

export interface Run {
  member: string;
  shard: number;
  id: string;
  key: string;
  seq: number;
  start: number;
  /** Undefined when the process died (or was never resumed) before the handler ended. */
  end?: number;
  /** Whether an acknowledgement of this entry by this member was accepted. */
  acked: boolean;
}

export interface CheckReport {
  produced: number;
  handled: number;
  /** Produced entries that Redis counts as acknowledged by the group at the end. */
  acknowledged: number;
  /** Produced entries never handled to the end, or still not acknowledged at the end (must be none). */
  lost: string[];
  /** Keys whose first handling of a sequence number came after a later one of the same key. */
  orderViolations: string[];
  /** Two members on one shard at the same time where the earlier one's acknowledgement counted. */
  overlaps: string[];
  duplicates: number;
  /** Duplicates with no fault that could have caused them. */
  unexplainedDuplicates: string[];
  faults: Fault[];
}

/**
 * Faults that may legitimately cause a redelivery (at-least-once). A graceful stop or a join must
 * not: the leaving member finishes and acknowledges what it started before it gives shards up.
 */
const REDELIVERING = new Set<FaultKind>(['kill', 'pause', 'partition', 'reset', 'redis-restart']);

/** How long before a first run a fault can still explain its redelivery (the run may have started just before it hit). */
const EXPLAIN_BEFORE_MS = 1000;

export function collectRuns(lines: RecordLine[]): Run[] {
  const open = new Map<string, Run>();
  const runs: Run[] = [];
  const accepted = new Set<string>();
  for (const line of lines) {
    if (line.e === 'ack' && line.ok) for (const id of line.ids ?? []) accepted.add(`${line.m}/${line.s}/${id}`);
  }
  for (const line of lines) {
    const key = `${line.m}/${line.s}/${line.id}`;
    if (line.e === 'start') {
      const run: Run = { member: line.m, shard: line.s!, id: line.id!, key: line.k!, seq: line.q!, start: line.t, acked: accepted.has(key) };
      open.set(key, run);
      runs.push(run);
    } else if (line.e === 'end') {
      const run = open.get(key);
      if (run) run.end = line.t;
      open.delete(key);
    }
  }
  return runs;
}

/**
 * `unacknowledged`: "shard/id" of the produced entries that Redis still has pending or undelivered
 * for the group when the run ends.
 */
export function check(produced: Produced[], lines: RecordLine[], faults: Fault[], unacknowledged: Set<string>): CheckReport {
  const runs = collectRuns([...lines].sort((a, b) => a.t - b.t));
  const completed = new Set(runs.filter((r) => r.end !== undefined).map((r) => `${r.shard}/${r.id}`));
  const lost = produced
    .filter((p) => !completed.has(`${p.shard}/${p.id}`) || unacknowledged.has(`${p.shard}/${p.id}`))
    .map((p) => `${p.shard}/${p.id} (${p.key}#${p.seq})${unacknowledged.has(`${p.shard}/${p.id}`) ? ' not acknowledged' : ''}`);

  // Per-key order: the first handling of each sequence number, in start order, never goes back.
  const orderViolations: string[] = [];
  const highest = new Map<string, number>();
  const seen = new Set<string>();
  for (const run of [...runs].sort((a, b) => a.start - b.start)) {
    const entry = `${run.key}#${run.seq}`;
    if (seen.has(entry)) continue;
    seen.add(entry);
    const top = highest.get(run.key) ?? 0;
    if (run.seq < top) orderViolations.push(`${run.key}: ${run.seq} after ${top} (shard ${run.shard}, ${run.member})`);
    highest.set(run.key, Math.max(top, run.seq));
  }

  // One reader per shard: no run by another member may start while an acknowledged run is in flight.
  const overlaps: string[] = [];
  const byShard = new Map<number, Run[]>();
  for (const run of runs) {
    const list = byShard.get(run.shard);
    if (list) list.push(run);
    else byShard.set(run.shard, [run]);
  }
  for (const [shard, list] of byShard) {
    list.sort((a, b) => a.start - b.start);
    for (let i = 0; i < list.length; i++) {
      const a = list[i];
      if (!a.acked || a.end === undefined) continue;
      for (let j = i + 1; j < list.length && list[j].start < a.end; j++) {
        if (list[j].member !== a.member) overlaps.push(`shard ${shard}: ${a.member} ${a.id} and ${list[j].member} ${list[j].id}`);
      }
    }
  }

  // Duplicates: every run of an entry after its first, each explained by a fault at that moment.
  const firstRun = new Map<string, Run>();
  let duplicates = 0;
  const unexplainedDuplicates: string[] = [];
  for (const run of [...runs].sort((a, b) => a.start - b.start)) {
    const entry = `${run.shard}/${run.id}`;
    const first = firstRun.get(entry);
    if (!first) {
      firstRun.set(entry, run);
      continue;
    }
    duplicates += 1;
    const explained = faults.some(
      (f) =>
        REDELIVERING.has(f.kind) &&
        f.at >= first.start - EXPLAIN_BEFORE_MS &&
        f.at <= run.start &&
        (f.kind === 'redis-restart' || f.target === first.member || f.target === run.member),
    );
    if (!explained) unexplainedDuplicates.push(`${entry}: ${first.member} at ${first.start.toFixed(0)}, again by ${run.member} at ${run.start.toFixed(0)}`);
  }

  return {
    produced: produced.length,
    handled: completed.size,
    acknowledged: produced.filter((p) => !unacknowledged.has(`${p.shard}/${p.id}`)).length,
    lost,
    orderViolations,
    overlaps,
    duplicates,
    unexplainedDuplicates,
    faults,
  };
}
