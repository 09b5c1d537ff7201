/**
 * What a member knows about its own lease. The coordinator's lease on the member started no earlier
 * than the send time of the last successful heartbeat; stopping a margin before it can end means no
 * handler starts after a shard could have been given to someone else, whatever the clocks say.
 */
export class MemberLease {
  /** When the last successful heartbeat was sent (monotonic ms); 0 before the first. */
  private lastGoodSentAt = 0;

  constructor(
    private readonly sessionTimeoutMs: number,
    /**
     * A static member: a new instance of its `memberInstanceId` may take it over once this one sent
     * no heartbeat for this long (`staticTakeoverAfterMs`), well before the session timeout. No
     * handler starts past that point (less a margin) until a heartbeat gets through again, or two
     * processes of one member instance would run its shards (SPEC 9.4). The shards are kept until
     * the session budget: an answer that says another instance took over stops this one for good.
     */
    private readonly takeoverAfterMs?: number,
  ) {}

  /**
   * A heartbeat sent at `sentAt` (performance.now()) renewed the lease. An answer that came back late
   * may report an older renewal than one already counted: the newest counts.
   */
  renewed(sentAt: number): void {
    this.lastGoodSentAt = Math.max(this.lastGoodSentAt, sentAt);
  }

  /** A member started again: no answer yet, as before the first one. */
  reset(): void {
    this.lastGoodSentAt = 0;
  }

  /** Before the first answer, only a member that holds nothing is safe. */
  isSafe(holdsShards: boolean): boolean {
    if (this.lastGoodSentAt === 0) return !holdsShards;
    return this.sinceRenewedMs() < this.startBudgetMs();
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
    return withMargin(this.sessionTimeoutMs);
  }

  /** How long after the last good heartbeat's send a handler may still start. */
  private startBudgetMs(): number {
    return this.takeoverAfterMs === undefined ? this.budgetMs() : Math.min(this.budgetMs(), withMargin(this.takeoverAfterMs));
  }
}

/** `ms` less a safety margin (a fifth, at most 1 s) for the time between a check and what it allows. */
function withMargin(ms: number): number {
  return ms - Math.min(1000, Math.floor(ms / 5));
}

/**
 * How long the instance holding a static member must have sent no heartbeat before a new instance
 * of its `memberInstanceId` may take the member over: two heartbeat intervals (the interval capped at
 * a third of the session timeout, as the coordinator caps it), so one late heartbeat does not lose a
 * live instance its id. The coordinator's rule, `staticTakeoverAfterMs` in redis/lua/includes/static.lua.
 */
export function staticTakeoverAfterMs(heartbeatIntervalMs: number, sessionTimeoutMs: number): number {
  return 2 * Math.max(1, Math.min(heartbeatIntervalMs, Math.floor(sessionTimeoutMs / 3)));
}
