/**
 * The owned-but-unread watch: while a seam fault lasts, every shard a group must own is read, i.e.
 * its last-delivered id moves on, or it has nothing newer to deliver. A shard whose owner (in
 * Redis) does not read it, because the member gave its lease up but Redis still counts it alive,
 * or its read connection is half-open and never reset, shows up here as one that stood still.
 */
import { compareStreamIds } from '@redis-stream-coordinator/core';
import { findGroupInfo } from '../../packages/core/src/redis/responses';
import type { ChaosHarness } from './harness';
import { sleep } from './harness-tools';
import { mustBeOwned } from './redis-state';

/** How often the watch looks: well under the bound, cheap (two calls per shard). */
const WATCH_EVERY_MS = 200;

/**
 * How long a shard may stay owned but unread (SPEC 10.1, 10.2): the member's own deadlines (a
 * heartbeat or read waited on for a third of the session, two in a row before a reset, a read's
 * grace of at least 2 s), then its session timeout before Redis expires it, then a rebalance: three
 * sessions plus the read grace, and a second for a loaded machine.
 */
export function ownedUnreadBoundMs(h: ChaosHarness): number {
  return h.sessionTimeoutMs * 3 + 2000 + 1000;
}

/** Watches every group for `ms`; returns one line per shard that stood still past `boundMs` with entries waiting. */
export async function watchReads(h: ChaosHarness, ms: number, boundMs: number): Promise<string[]> {
  const since = new Map<string, { delivered: string; at: number }>();
  const unread = new Map<string, string>();
  const end = performance.now() + ms;
  while (performance.now() < end) {
    await sleep(WATCH_EVERY_MS);
    for (const group of h.groups) {
      let description: Awaited<ReturnType<typeof h.admin.describeGroup>>;
      try {
        description = await h.admin.describeGroup(h.streamPrefix, group);
      } catch {
        continue; // Redis busy: the next look
      }
      for (const shard of description.shards.filter(mustBeOwned)) {
        const key = h.admin.keys.shardStream(h.streamPrefix, shard.shardIndex);
        const [groups, newest] = await Promise.all([
          h.redis.xinfo('GROUPS', key).catch(() => []),
          h.redis.xrevrange(key, '+', '-', 'COUNT', 1).catch(() => []),
        ]);
        const delivered = findGroupInfo(groups, group)?.lastDelivered ?? '0-0';
        const name = `${group} shard ${shard.shardIndex}`;
        const now = performance.now();
        const last = since.get(name);
        const caughtUp = newest[0] === undefined || compareStreamIds(delivered, newest[0][0]) >= 0;
        if (!last || last.delivered !== delivered || caughtUp) {
          since.set(name, { delivered, at: now });
          continue;
        }
        if (now - last.at > boundMs && !unread.has(name))
          unread.set(
            name,
            `${name} (owner ${shard.owner ?? 'none'}, ${shard.state}) unread for ${Math.round(now - last.at)} ms at ${delivered}`,
          );
      }
    }
  }
  return [...unread.values()];
}
