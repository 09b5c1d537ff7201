/**
 * What a member knows about its own lease. The coordinator's lease on the member started no earlier
 * than the send time of the last successful heartbeat; stopping a margin before it can end means no
 * handler starts after a shard could have been given to someone else, whatever the clocks say.
 */
export class MemberLease {
  /** When the last successful heartbeat was sent (monotonic ms); 0 before the first. */
  private lastGoodSentAt = 0;

  constructor(private readonly sessionTimeoutMs: number) {}

  /** A heartbeat sent at `sentAt` (performance.now()) was answered (accepted or refused by the coordinator). */
  renewed(sentAt: number): void {
    this.lastGoodSentAt = sentAt;
  }

  /** A member started again: no answer yet, as before the first one. */
  reset(): void {
    this.lastGoodSentAt = 0;
  }

  /** Before the first answer, only a member that holds nothing is safe. */
  isSafe(holdsShards: boolean): boolean {
    if (this.lastGoodSentAt === 0) return !holdsShards;
    return this.sinceRenewedMs() < this.budgetMs();
  }

  /** Whether the lease may have run out by now (the budget is spent). */
  isSpent(): boolean {
    return this.sinceRenewedMs() >= this.budgetMs();
  }

  /**
   * When the member gives its lease up unless a heartbeat is answered first (performance.now()):
   * no handler starts from then on and its shards are dropped. Undefined before the first answer.
   */
  giveUpAt(): number | undefined {
    return this.lastGoodSentAt === 0 ? undefined : this.lastGoodSentAt + this.budgetMs();
  }

  sinceRenewedMs(): number {
    return performance.now() - this.lastGoodSentAt;
  }

  private budgetMs(): number {
    const margin = Math.min(1000, Math.floor(this.sessionTimeoutMs / 5));
    return this.sessionTimeoutMs - margin;
  }
}
