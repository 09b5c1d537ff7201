/**
 * What a reset-offsets fault (operation-faults.ts) asked a group to read again, for the checker's
 * promises: an entry after a reset's point (and not below what the stream kept then) is read again
 * after the reset, a new life of it, whose runs, acks and dead letters are the operator's asking.
 */
import { compareStreamIds } from '../../packages/core/src/protocol/stream-ids';
import type { Fault, OffsetReset } from './records';

/** Every shard a run's faults moved back. */
export function offsetResets(faults: Fault[]): OffsetReset[] {
  return faults.flatMap((f) => f.resets ?? []);
}

/** Whether `r` moved its group back over entry `id` of `shard`: it lies after the reset point, in what the stream kept. */
export function rewound(r: OffsetReset, shard: number, id: string): boolean {
  return r.shard === shard && compareStreamIds(id, r.to) > 0 && (r.oldest === undefined || compareStreamIds(id, r.oldest) >= 0);
}

/**
 * Whether a reset of `group` that moved it back over the entry lies between `a` and `b` (wall-clock
 * ms, either order): what happened to the entry at one time and at the other are two lives of it
 * (a dead letter before the reset and an acknowledgement of the re-read after it).
 */
export function resetBetween(resets: OffsetReset[], group: string, shard: number, id: string, a: number, b: number): boolean {
  const [from, to] = a <= b ? [a, b] : [b, a];
  return resets.some((r) => (r.group || '') === (group || '') && r.resetAt > from && r.resetAt <= to && rewound(r, shard, id));
}

/** Whether `r` moved its group forward over entry `id` of `shard`: after its last-delivered id then, up to the reset point. */
export function skippedBy(r: OffsetReset, shard: number, id: string): boolean {
  return r.shard === shard && r.from !== null && compareStreamIds(id, r.from) > 0 && compareStreamIds(id, r.to) <= 0;
}
