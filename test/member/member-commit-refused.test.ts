import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder } from '@redis-stream-coordinator/core';
import { scriptCall } from '../reliability/script-match';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 3 (errors and what the member does): a member asked to compute the target commits it in a call
// of its own. That call can be refused (UNKNOWN_MEMBER_ID: its lease ran out meanwhile on a loaded
// machine, or the group's keys were lost; GROUP_NOT_FOUND: Redis lost every key) and then it must
// drop everything and rejoin, as for a refused heartbeat. Taken for an accepted answer instead, the
// refusal's placeholder epoch (-1) became the member's epoch: every heartbeat after it was a leave,
// which the coordinator accepts without a word, and the process stayed out of its group for good (the
// short tier: "running but not in the group: [p2]" for 184 s after group-keys-lost and a Redis flush).
const redis = useRedisServer();
const aMember = memberFactory(redis, { sessionTimeoutMs: 3000, coordinator: { heartbeatIntervalMs: 200 } });
const aProxy = proxyFactory(redis);

/**
 * A member behind a proxy whose first target commit is held there until `meanwhile` (run against Redis
 * directly) has happened; resolves with the member, and with its refusals and fencings seen.
 */
async function aMemberWhoseFirstCommitWaitsFor(meanwhile: (streamPrefix: string) => Promise<unknown>) {
  const streamPrefix = uniqueName('commit-refused');
  await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 4 });
  const proxy = await aProxy();
  const held = proxy.holdNextRequest(scriptCall('commitAssignment'));
  const member = aMember({ streamPrefix, memberId: 'committer', handler: () => undefined }, redis.clientAt(proxy.url));
  const fenced: string[] = [];
  member.on('fenced', (event) => fenced.push(event.message));
  const started = member.start().then(
    () => 'started',
    (error: Error) => error.message,
  );
  await held.arrived;
  await meanwhile(streamPrefix);
  held.release();
  return { streamPrefix, member, fenced, started };
}

/** Whether `memberId` is an ACTIVE, proven member of the group with shards, as Redis says. */
async function activeWithShards(streamPrefix: string, memberId: string): Promise<boolean> {
  const description = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group').catch(() => undefined);
  const record = description?.members.find((m) => m.memberId === memberId);
  return record?.state === 'ACTIVE' && record.unprovenSince === null && record.currentAssignment.length > 0;
}

describe('a refused target commit', () => {
  it("refused UNKNOWN_MEMBER_ID (the group's keys lost between the heartbeat and the commit): the member rejoins and owns shards again", async () => {
    const { streamPrefix, member, fenced, started } = await aMemberWhoseFirstCommitWaitsFor((prefix) =>
      redis.client().del(...new KeyBuilder().groupKeys(prefix, 'group').slice(2)),
    );
    await pollUntil('the member a member of the recreated group, owning shards', async () => activeWithShards(streamPrefix, 'committer'), {
      timeoutMs: 10_000,
    });
    expect(await started).toBe('started');
    expect(member.currentMemberEpoch()).toBeGreaterThan(0);
    expect(fenced.some((message) => /not an active member/.test(message))).toBe(true);
  }, 30_000);

  it('refused UNKNOWN_MEMBER_ID (Redis lost every key between the heartbeat and the commit, another member recreated the stream): the member rejoins', async () => {
    const { streamPrefix, member, fenced } = await aMemberWhoseFirstCommitWaitsFor(async (prefix) => {
      await redis.client().flushall();
      await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix: prefix, shardCount: 4 });
    });
    await pollUntil('the member a member of the recreated stream, owning shards', async () => activeWithShards(streamPrefix, 'committer'), {
      timeoutMs: 10_000,
    });
    expect(member.currentMemberEpoch()).toBeGreaterThan(0);
    expect(fenced.some((message) => /not an active member/.test(message))).toBe(true);
  }, 30_000);
});
