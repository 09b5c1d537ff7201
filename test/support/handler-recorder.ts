import type { StreamMessage } from '@redis-stream-coordinator/core';

export interface HandlerRun {
  memberId: string;
  shardIndex: number;
  id: string;
  key: string;
  seq: number;
  deliveryCount: number;
  start: number;
  end: number;
}

export interface KeyedPayload {
  seq: number;
}

/**
 * Records every handler run (who, which shard and entry, when it started and ended), so tests can
 * check exactly-once, per-key order and that no two handlers ran on one shard at the same time.
 */
export class HandlerRecorder {
  readonly runs: HandlerRun[] = [];

  handler(memberId: string, work: (message: StreamMessage<KeyedPayload>) => Promise<void> | void = () => undefined) {
    return async (message: StreamMessage<KeyedPayload>) => {
      const start = performance.now();
      await work(message);
      this.runs.push({
        memberId,
        shardIndex: message.shardIndex,
        id: message.id,
        key: message.key ?? '',
        seq: message.payload.seq,
        deliveryCount: message.deliveryCount,
        start,
        end: performance.now(),
      });
    };
  }

  /** Distinct entries handled (by stream and id). */
  distinctEntries(): number {
    return new Set(this.runs.map((r) => `${r.shardIndex}/${r.id}`)).size;
  }

  /** Entries handled more than once. */
  duplicates(): HandlerRun[] {
    const seen = new Set<string>();
    return this.runs.filter((r) => {
      const id = `${r.shardIndex}/${r.id}`;
      if (seen.has(id)) return true;
      seen.add(id);
      return false;
    });
  }

  /**
   * Keys whose first handling of each sequence number is out of order. Redeliveries (a sequence
   * handled again after a later one) do not count: at-least-once allows them.
   */
  orderViolations(): string[] {
    const lastFirstSeen = new Map<string, number>();
    const handled = new Map<string, Set<number>>();
    const violations: string[] = [];
    for (const run of [...this.runs].sort((a, b) => a.start - b.start)) {
      const seen = handled.get(run.key) ?? new Set<number>();
      handled.set(run.key, seen);
      if (seen.has(run.seq)) continue;
      seen.add(run.seq);
      const last = lastFirstSeen.get(run.key) ?? 0;
      if (run.seq < last) violations.push(`${run.key}: ${run.seq} after ${last}`);
      lastFirstSeen.set(run.key, Math.max(last, run.seq));
    }
    return violations;
  }

  /** Pairs of runs on one shard that overlapped in time. */
  overlaps(): string[] {
    const byShard = new Map<number, HandlerRun[]>();
    for (const run of this.runs) {
      const list = byShard.get(run.shardIndex);
      if (list) list.push(run);
      else byShard.set(run.shardIndex, [run]);
    }
    const found: string[] = [];
    for (const [shard, runs] of byShard) {
      runs.sort((a, b) => a.start - b.start);
      for (let i = 1; i < runs.length; i++) {
        if (runs[i].start < runs[i - 1].end)
          found.push(`shard ${shard}: ${runs[i - 1].memberId} ${runs[i - 1].id} and ${runs[i].memberId} ${runs[i].id}`);
      }
    }
    return found;
  }
}

/** `perKey` entries for each of `keys` keys, with per-key sequence numbers 1..perKey, interleaved. */
export function keyedMessages(keys: number, perKey: number, label = 'key') {
  const messages: { key: string; payload: KeyedPayload }[] = [];
  for (let seq = 1; seq <= perKey; seq++) {
    for (let k = 0; k < keys; k++) messages.push({ key: `${label}-${k}`, payload: { seq } });
  }
  return messages;
}
