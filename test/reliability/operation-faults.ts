/**
 * Operations as the soak's own actors: what an operator runs against a live group (SPEC 10.5), with
 * the checker's expectation following what the operation asked for.
 */
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { TcpProxy } from '../support/tcp-proxy';
import type { Fault, OffsetReset } from './records';
import type { ChaosHarness } from './harness';
import { sleep } from './harness-tools';
import { resize } from './resize-faults';
import { oldestKept } from './redis-state';

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
      oldest.set(shard, oldestKept(await h.retainedFrom(shard)));
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
 * fault) runs to its end, then `deleteDrainedShards` starts through a proxy of its own, which holds
 * its first deletion (a client DEL, or the per-shard `deleteRetiredShard` script) once the shards
 * are retired; meanwhile the stream grows back to its former count and the load writes to the
 * shard brought back; then the deletion goes on. It must not delete what was written since (the
 * checker's `lost`). A deletion refused while a group still needs a shard is asked again.
 */
export async function deleteRacingResizeBack(h: ChaosHarness, fault: Fault): Promise<{ liftedAt: number }> {
  const shrink: Fault = { kind: 'shrink-ordered', at: fault.at };
  const { liftedAt } = await resize(h, shrink, false, true, 1000);
  shrink.recoveryMs = performance.now() - liftedAt;
  h.faults.push(shrink);
  const proxy = (await h.target.proxy())!;
  const client = h.target.connect(proxy);
  const admin = new CoordinatorAdmin(client);
  // The first shard past the new count is the first one retired: its deletion (a DEL before
  // ca46873, the deleteRetiredShard script after, sent by EVAL on a new client) names its stream
  // as a whole RESP argument.
  const retired = `\r\n${h.admin.keys.shardStream(h.streamPrefix, (await h.admin.describeStream(h.streamPrefix))!.shardCount)}\r\n`;
  const commands = ['DEL', 'EVAL', 'EVALSHA'].map((name) => TcpProxy.command(name));
  const held = proxy.holdNextRequest((request) => commands.some((is) => is(request)) && request.includes(retired));
  try {
    const deletion = (async () => {
      for (let attempt = 0; attempt < DELETE_ATTEMPTS; attempt++) {
        try {
          return await admin.deleteDrainedShards(h.streamPrefix);
        } catch (error) {
          // Refused while a group still needs a shard: asked again shortly.
          if ((error as Error).name !== 'ResizeInProgressError') throw error;
          await sleep(100);
        }
      }
      return [] as number[];
    })();
    const arrived = await Promise.race([
      held.arrived.then(() => true),
      deletion.then(() => false),
      sleep(DELETE_HOLD_MS).then(() => false),
    ]);
    let grow: Fault | undefined;
    if (arrived) {
      // The shards are retired and the deletion is on its way: the resize back goes first, and
      // writes land on the shard it brings back, before the deletion is let go (at the latest after
      // DELETE_HOLD_MS: a resize that waits for the deletion must not wait for ever).
      grow = { kind: 'grow-ordered', at: performance.timeOrigin + performance.now() };
      const growth = resize(h, grow, true, true, 1000).then(() => sleep(WRITES_AFTER_GROWTH_MS));
      await Promise.race([growth.catch(() => undefined), sleep(DELETE_HOLD_MS)]);
      held.release();
      await growth;
      h.faults.push(grow);
    }
    held.release();
    const deleted = await deletion;
    h.shardsDeleted(deleted);
    // A shard the resize brought back is read again: deleting it (its stream, its group positions,
    // its fencing tokens) is what the deletion's re-check in the shard's slot must refuse.
    const count = (await h.admin.describeStream(h.streamPrefix))!.shardCount;
    const live = deleted.filter((shard) => shard < count);
    if (live.length > 0)
      throw new Error(
        `deleteDrainedShards deleted shard(s) [${live.join(',')}] after the resize back made them readable again (${count} shards)`,
      );
    fault.target = `${shrink.target}, then ${grow ? `${grow.target} while` : 'no resize back:'} deleteDrainedShards deleted [${deleted.join(',')}]`;
    if (!grow) {
      const back: Fault = { kind: 'grow-ordered', at: performance.timeOrigin + performance.now() };
      await resize(h, back, true, true, 1000);
      h.faults.push(back);
    }
  } finally {
    held.release();
    client.disconnect();
    await proxy.stop();
  }
  return { liftedAt: performance.now() };
}

/** How long the racing deletion is held at most (a resize that waits for it then goes on). */
const DELETE_HOLD_MS = 8000;

/** Writes the load makes to the shard brought back before the held deletion goes on: several per shard at 200 entries/s. */
const WRITES_AFTER_GROWTH_MS = 1000;

/** How often a racing deleteDrainedShards asks again (every 100 ms: 10 s) before it leaves the shards for a later call. */
const DELETE_ATTEMPTS = 100;
