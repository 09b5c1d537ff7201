/**
 * How many shards' calls of one step (claims, takeovers, sweeps) are out at once. One at a time, a
 * member granted every shard of a large stream (65,536 shards, MAX_SHARD_COUNT then) spent a round trip per
 * shard and step before it read anything: tens of seconds. Side by side on the connection, they are
 * pipelined by it; this bound keeps the replies in memory and Redis' queue of them small.
 */
export const SHARD_CALLS_IN_FLIGHT = 256;

/**
 * Runs `step` for each shard, SHARD_CALLS_IN_FLIGHT at a time, in order of `states`. Each shard's
 * step is its own (a shard's outcome never depends on another's); when one fails, the others of its
 * group still settle, and the first failure is thrown after them (the loop reports it and comes back).
 */
export async function forShardsSideBySide<S>(states: readonly S[], step: (state: S) => Promise<void>): Promise<void> {
  for (let from = 0; from < states.length; from += SHARD_CALLS_IN_FLIGHT) {
    const results = await Promise.allSettled(states.slice(from, from + SHARD_CALLS_IN_FLIGHT).map(step));
    const failed = results.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
  }
}
