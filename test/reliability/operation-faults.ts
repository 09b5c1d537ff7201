/**
 * Operations as the soak's own actors: what an operator runs against a live group (SPEC 10.5), with
 * the checker's expectation following what the operation asked for.
 */
import type { Fault, OffsetReset } from './records';
import type { ChaosHarness } from './harness';
import { sleep } from './harness-tools';
import { resize } from './resize-faults';

/** The smallest stream id after `id`. */
function nextId(id: string): string {
  const [ms, seq] = id.split('-');
  return `${ms}-${BigInt(seq) + 1n}`;
}

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
    // The oldest entry each shard kept (an emptied stream keeps none up to its last id): only what
    // is still in the stream can be read again.
    const oldest = new Map<number, string | undefined>();
    for (let shard = 0; shard < h.maxShards; shard++) {
      const kept = await h.retainedFrom(shard);
      oldest.set(shard, kept && (kept.inclusive ? nextId(kept.id) : kept.id));
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

/**
 * deleteDrainedShards racing a resize back (SPEC 10.5): an ordered shrink (recorded as its own
 * fault) runs to its end, then `deleteDrainedShards` and a growth back to the former count start
 * together. Whichever goes first, the shard the growth brings back must not lose what is written to
 * it afterwards (the checker's `lost`), and a deletion that lost the race is called again until it
 * finishes or has nothing left to delete.
 */
export async function deleteRacingResizeBack(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const shrink: Fault = { kind: 'shrink-ordered', at: fault.at };
  const { liftedAt } = await resize(h, shrink, false, true, 1000);
  shrink.recoveryMs = performance.now() - liftedAt;
  h.faults.push(shrink);
  const grow: Fault = { kind: 'grow-ordered', at: performance.timeOrigin + performance.now() };
  const deletion = (async () => {
    for (let attempt = 0; attempt < DELETE_ATTEMPTS; attempt++) {
      try {
        return await h.admin.deleteDrainedShards(h.streamPrefix);
      } catch (error) {
        // Refused while a group still needs a shard (the growth's cutover): asked again shortly.
        if ((error as Error).name !== 'ResizeInProgressError') throw error;
        await sleep(100);
      }
    }
    return [] as number[];
  })();
  const [deleted, grown] = await Promise.allSettled([deletion, resize(h, grow, true, true, 1000)]);
  h.faults.push(grow);
  if (deleted.status === 'rejected') throw new Error(`deleteDrainedShards failed: ${(deleted.reason as Error).message}`);
  if (grown.status === 'rejected') throw new Error(`the resize back failed: ${(grown.reason as Error).message}`);
  h.shardsDeleted(deleted.value);
  fault.target = `${shrink.target}, then ${grow.target} with deleteDrainedShards deleting [${deleted.value.join(',')}]`;
  return { liftedAt: performance.now() };
}

/** How often a racing deleteDrainedShards asks again (every 100 ms: 10 s) before it leaves the shards for a later call. */
const DELETE_ATTEMPTS = 100;
