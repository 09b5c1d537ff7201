/**
 * Operations as the soak's own actors: what an operator runs against a live group (SPEC 10.5), with
 * the checker's expectation following what the operation asked for.
 */
import type { Fault, OffsetReset } from './records';
import type { ChaosHarness } from './harness';

/** How far back a reset to a time goes: a few sessions of entries, read again while the load goes on. */
const RESET_BACK_MS = 2000;

/**
 * reset-offsets with `force` while the members are live: the first group moved back on every shard,
 * to the earliest retained entry (one time in three, when retention runs) or to RESET_BACK_MS ago.
 * Everything after the reset point, up to where the group was, must be handled again
 * (`CheckReport.notReplayed`), whatever retention trims meanwhile (it must keep what the reset asked
 * to re-read); those runs are no duplicates to explain.
 */
export async function resetOffsets(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const group = h.consumerGroup;
  const earliest = h.settings.retentionMs > 0 && h.random() < 1 / 3;
  const to = earliest ? ('earliest' as const) : { datetime: Date.now() - RESET_BACK_MS };
  // Re-reading is work queued behind the live load: no owner is to blame for it for a while.
  h.excuse(undefined, h.sessionTimeoutMs * 5);
  // No trim between the look at each shard's oldest entry and the reset: what the reset then asks
  // to re-read is exactly what the stream held.
  await h.pauseRetention();
  try {
    const oldest = new Map<number, string | undefined>();
    for (let shard = 0; shard < h.maxShards; shard++) {
      const [first] = await h.redis.xrange(h.admin.keys.shardStream(h.streamPrefix, shard), '-', '+', 'COUNT', 1);
      oldest.set(shard, first?.[0]);
    }
    const resetAt = performance.timeOrigin + performance.now();
    const result = await h.admin.resetOffsets(h.streamPrefix, group, { to, force: true });
    const resets: OffsetReset[] = result.shards
      .filter((s) => s.from === null || s.from !== s.to)
      .map((s) => ({ group, shard: s.shardIndex, from: s.from, to: s.to, oldest: oldest.get(s.shardIndex), resetAt }));
    fault.resets = resets;
    fault.detail = `(${group} to ${earliest ? 'earliest' : `${RESET_BACK_MS} ms ago`}, ${resets.length} shards moved back)`;
  } finally {
    h.resumeRetention();
  }
  return { liftedAt: performance.now() };
}
