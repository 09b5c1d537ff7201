/** How long one bound of Redis's clock is trusted before a newer answer replaces it, better or not. */
const BOUND_TTL_MS = 60_000;

/**
 * What a member can know of Redis's clock, to set deadlines in it (HeartbeatRequest.deadline). A
 * heartbeat answer says when its script ran (`serverTimeMs`), which was before the answer arrived:
 * Redis time minus this process's monotonic time was then at least `serverTimeMs - receivedAt`. The
 * best such bound (the answer that came back fastest) of the last minute turns a local moment into a
 * Redis time that is no later than it, whatever the two wall clocks say: a request given that
 * deadline can only count in Redis while its member still waits for the answer. Older bounds give
 * way so that a Redis clock set back (or a failover to a host whose clock is behind) is followed.
 */
export class RedisClockBound {
  private best: { offsetMs: number; at: number } | undefined;

  /** An answer received at `receivedAt` (performance.now()) said Redis time was `serverTimeMs`. */
  observe(serverTimeMs: number, receivedAt: number): void {
    const offsetMs = serverTimeMs - receivedAt;
    if (this.best === undefined || offsetMs >= this.best.offsetMs || receivedAt - this.best.at > BOUND_TTL_MS) {
      this.best = { offsetMs, at: receivedAt };
    }
  }

  /** The Redis time (ms) no later than the local moment `at` (performance.now()); undefined before any answer. */
  redisTimeAt(at: number): number | undefined {
    return this.best === undefined ? undefined : Math.floor(at + this.best.offsetMs);
  }
}
