import type { DashboardLocalMember } from './dashboard-options';

/** The window a rate is averaged over. */
const WINDOW_MS = 10_000;

/**
 * Handler rates of the members running in this process, from their `acknowledged` events: Redis
 * keeps no such count, so members of other processes show none (their own dashboards have them).
 * Each member is listened to once; the counts live in one-second buckets of the last window.
 */
export class HandlerRates {
  private readonly seen = new WeakSet<DashboardLocalMember>();
  private readonly buckets = new Map<string, Map<number, number>>();

  constructor(private readonly now: () => number = Date.now) {}

  /** Starts counting for members not seen before (the list may grow while the application runs). */
  track(members: Iterable<DashboardLocalMember>): void {
    for (const member of members) {
      if (this.seen.has(member)) continue;
      this.seen.add(member);
      member.on('acknowledged', (event) => {
        if (event.accepted) this.count(member.memberId, event.ids.length);
      });
    }
  }

  /** Acknowledged entries per second over the last 10 s, by member id (only members of this process). */
  rates(): Map<string, number> {
    const from = Math.floor((this.now() - WINDOW_MS) / 1000);
    const rates = new Map<string, number>();
    for (const [memberId, buckets] of this.buckets) {
      let total = 0;
      for (const [second, count] of buckets) {
        if (second <= from) buckets.delete(second);
        else total += count;
      }
      rates.set(memberId, total / (WINDOW_MS / 1000));
    }
    return rates;
  }

  private count(memberId: string, n: number): void {
    let buckets = this.buckets.get(memberId);
    if (!buckets) this.buckets.set(memberId, (buckets = new Map()));
    const second = Math.floor(this.now() / 1000);
    buckets.set(second, (buckets.get(second) ?? 0) + n);
  }
}
