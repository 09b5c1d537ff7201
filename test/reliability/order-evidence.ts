/**
 * What a per-key order violation's report shows (issue: "late-1: stale-8: 43 after 44" was seen once
 * and nothing of that run was kept): the key's entries next to the two sequence numbers as written
 * (shard, stream id, when the write was confirmed), their first runs in the group (member, shard,
 * grant, start), and the resizes around them with their switch times. Enough to tell which shards
 * and which cutover the two entries crossed, without the record files.
 */
import type { Fault, Produced, Run } from './records';

export interface OrderViolation {
  group: string;
  key: string;
  /** The sequence number that ran late, and the highest one of the key that had started before it. */
  seq: number;
  top: number;
}

const RESIZES = new Set<Fault['kind']>([
  'grow-ordered',
  'grow-unordered',
  'shrink-ordered',
  'shrink-unordered',
  'new-group',
  'stale-producer',
  'delete-drained',
  'redis-flush-restart',
]);
/** Resizes this long before the first or after the last of the entries are left out. */
const AROUND_MS = 30_000;

export function orderEvidence(
  violation: OrderViolation,
  produced: Produced[],
  runs: Run[],
  faults: Fault[],
  resizeHistory?: string,
): string[] {
  const { group, key, seq, top } = violation;
  // The late entry and the one it ran after, each with its neighbours (where the key may have moved).
  const seqs = new Set([seq - 1, seq, seq + 1, top - 1, top, top + 1]);
  const time = (ms: number | undefined) => (ms === undefined ? '?' : new Date(ms).toISOString());
  const lines = [`evidence for ${group ? `${group}: ` : ''}${key}: ${seq} after ${top}`];
  const written = produced.filter((p) => p.key === key && seqs.has(p.seq)).sort((a, b) => a.seq - b.seq || a.at! - b.at!);
  for (const p of written) lines.push(`  written ${key}#${p.seq}: shard ${p.shard} id ${p.id} confirmed ${time(p.at)}`);
  const first = new Map<number, Run>();
  for (const run of [...runs].sort((a, b) => a.start - b.start)) {
    if (run.group === group && run.key === key && seqs.has(run.seq) && !first.has(run.seq)) first.set(run.seq, run);
  }
  for (const [n, run] of [...first].sort((a, b) => a[0] - b[0])) {
    lines.push(
      `  first run ${key}#${n}: shard ${run.shard} id ${run.id} by ${run.member} grant ${run.grant ?? '?'} started ${time(run.start)}${run.end === undefined ? ' (never ended)' : ''}`,
    );
  }
  const times = written.map((p) => p.at).filter((t): t is number => t !== undefined);
  const [from, to] = times.length
    ? [times.reduce((a, b) => Math.min(a, b), Infinity) - AROUND_MS, times.reduce((a, b) => Math.max(a, b), -Infinity) + AROUND_MS]
    : [-Infinity, Infinity];
  for (const f of faults.filter((f) => RESIZES.has(f.kind) && f.at >= from && f.at <= to)) {
    lines.push(`  fault ${f.kind} ${f.target ?? ''}${f.detail ? ` ${f.detail}` : ''} at ${time(f.at)}`);
  }
  if (resizeHistory) lines.push(`  resizeHistory at the end: ${resizeHistory}`);
  return lines;
}
