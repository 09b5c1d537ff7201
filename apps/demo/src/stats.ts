import { Injectable } from '@nestjs/common';

/** Counts what this process handled, per shard, for GET /group. */
@Injectable()
export class Stats {
  private readonly counts = new Map<string, Map<number, number>>();

  count(what: string, shardIndex: number): void {
    const perShard = this.counts.get(what) ?? new Map<number, number>();
    perShard.set(shardIndex, (perShard.get(shardIndex) ?? 0) + 1);
    this.counts.set(what, perShard);
  }

  total(what: string): number {
    let sum = 0;
    for (const n of this.counts.get(what)?.values() ?? []) sum += n;
    return sum;
  }

  snapshot(): Record<string, Record<number, number>> {
    return Object.fromEntries([...this.counts].map(([what, perShard]) => [what, Object.fromEntries(perShard)]));
  }
}
