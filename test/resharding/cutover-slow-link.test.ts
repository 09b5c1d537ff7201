import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { cutoverCheckIntervalMs: 50 });
const aProxy = proxyFactory(redis);

/**
 * The session of the member below (its heartbeats are bounded by a third of it, 1000 ms), and how late
 * every answer of its link comes: one round trip (a heartbeat) is well within that bound, three in a
 * row (a cutover check's progress read: Redis TIME, the routing markers and XINFO, the probes) are not.
 */
const SESSION_MS = 3000;
const REPLY_LATE_MS = 400;

describe('the cutover checks of a member on a slow link', () => {
  it('complete the cutover of an ordered shrink although every answer comes 400 ms late (three round trips pass a heartbeat bound)', async () => {
    const streamPrefix = uniqueName('slow-cutover');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 3 });
    const proxy = await aProxy();
    const member = aMember(
      { streamPrefix, memberId: 'slow', sessionTimeoutMs: SESSION_MS, coordinator: { heartbeatIntervalMs: 500 }, handler: () => undefined },
      redis.clientAt(proxy.url, { maxRetriesPerRequest: 1 }),
    );
    const failedChecks: string[] = [];
    member.on('error', (error) => {
      if (/checking the group's cutover failed/.test(error.message)) failedChecks.push(error.message);
    });
    await member.start();
    await pollUntil('the member owns every shard', async () => member.ownedShards().length === 3);
    proxy.delay('reply', REPLY_LATE_MS);

    // Nobody but the member completes it (the admin only reads its status): the member's checks must.
    await admin.resizeShards(streamPrefix, 2, { ordered: true, graceMs: 200, switchDelayMs: 100 });
    await pollUntil(
      'the member to complete the cutover',
      async () => (await admin.cutoverStatus(streamPrefix)).every((status) => status.cutover === null),
      { timeoutMs: 15_000 },
    ).catch((error: Error) => {
      throw new Error(`${error.message}; its checks failed ${failedChecks.length} times (${failedChecks[0] ?? 'none'})`);
    });
    // Its heartbeats kept its membership meanwhile (one round trip each): the link was slow, not broken.
    expect(member.stats().joined).toBe(true);
  }, 40_000);
});
