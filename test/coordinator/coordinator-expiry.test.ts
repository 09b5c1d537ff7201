import { describe, expect, it } from 'vitest';
import { aGroup, type GroupFixture, ownership } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { settle } from '@redis-stream-coordinator/core/testing';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

async function eventsOf(group: GroupFixture, type: string): Promise<string[][]> {
  const events = await redis.client().xrange(group.coordinator.keys.groupEvents(group.streamPrefix, group.consumerGroup), '-', '+');
  return events.map(([, fields]) => fields).filter((fields) => fields[1] === type);
}

describe('lease expiry (SPEC 2.4), by Redis time', () => {
  it('a member that stops heartbeating is EXPIRED after sessionTimeoutMs, and its shards go to the others', async () => {
    const group = await aGroup(redis, 6);
    // A second, not 200 ms: while three members join and settle, a loaded machine (three test files
    // at a time) left more than 200 ms between two of quiet's heartbeats, and it expired twice.
    const quiet = group.member('quiet', { sessionTimeoutMs: 1000 });
    const b = group.member('b');
    const c = group.member('c');
    for (const m of [quiet, b, c]) await m.join();
    await settle([quiet, b, c]);
    const quietShards = ownership(await group.describe()).quiet;
    expect(quietShards).toHaveLength(2);

    await pollUntil('quiet to expire', async () => {
      await b.heartbeat();
      return (await group.describe()).members.find((m) => m.memberId === 'quiet')!.state === 'EXPIRED';
    });
    await settle([b, c]);
    const description = await group.describe();
    expect([...ownership(description).b, ...ownership(description).c].sort((x, y) => x - y)).toEqual([0, 1, 2, 3, 4, 5]);
    const expired = description.members.find((m) => m.memberId === 'quiet')!;
    expect(expired).toMatchObject({ state: 'EXPIRED', currentAssignment: [], revoking: [] });
    expect(Date.parse(expired.memberLeaseExpiresAt) - Date.parse(expired.lastHeartbeatAt)).toBe(1000);
    expect(await eventsOf(group, 'MEMBER_EXPIRED')).toHaveLength(1);
  });

  it('a member that does not acknowledge a revocation within rebalanceTimeoutMs is removed', async () => {
    const group = await aGroup(redis, 4);
    const stuck = group.member('stuck', { rebalanceTimeoutMs: 150 });
    await stuck.join();
    const b = group.member('b');
    await b.join(); // stuck must now revoke two shards, and never acknowledges them
    await stuck.heartbeat({ ackedRevocations: [] });
    expect(stuck.revoking).toHaveLength(2);
    await pollUntil('stuck to be removed', async () => {
      await b.heartbeat();
      return (await group.describe()).members.find((m) => m.memberId === 'stuck')!.state === 'EXPIRED';
    });
    const [event] = await eventsOf(group, 'MEMBER_EXPIRED');
    expect(event).toContain('rebalance-timeout');
    await settle([b]);
    expect(ownership(await group.describe()).b).toEqual([0, 1, 2, 3]);
  });
});

describe('request deadlines (SPEC 9.1: only a heartbeat whose answer the member acts on renews its lease)', () => {
  it('a heartbeat that runs after its deadline changes nothing, steady or not, and says when it ran', async () => {
    const group = await aGroup(redis, 2);
    const a = group.member('a', { sessionTimeoutMs: 5000 });
    await a.join();
    const steady = await settle([a]);
    const before = (await group.describe()).members[0];
    const ranAt = steady.serverTimeMs!;
    expect(ranAt).toBeGreaterThan(0);

    // The steady path (nothing changed) and the full path (a new report) both refuse a late request.
    for (const overrides of [{}, { activeConsumerWorkers: 7 }, { memberEpoch: 0, owned: [] }]) {
      const late = await a.send({ ...overrides, deadline: ranAt - 1 });
      expect(late).toMatchObject({
        errorCode: 'DEADLINE_EXCEEDED',
        errorMessage: expect.stringMatching(/after its deadline; nothing changed/),
      });
      expect(late.serverTimeMs).toBeGreaterThan(ranAt - 1);
    }
    const after = (await group.describe()).members[0];
    expect(after).toEqual(before); // the lease, the epoch, the report: untouched

    // In time, it counts.
    const onTime = await a.heartbeat({ deadline: Date.now() + 60_000 });
    expect(onTime.errorCode).toBe('NONE');
    expect(Date.parse((await group.describe()).members[0].lastHeartbeatAt)).toBeGreaterThan(Date.parse(before.lastHeartbeatAt));
  });
});

describe('retention of LEFT and EXPIRED members', () => {
  it('keeps at most retentionMaxCount records, the newest', async () => {
    const group = await aGroup(redis, 2, { retentionMaxCount: 2 });
    const keeper = group.member('keeper');
    await keeper.join();
    for (const id of ['gone-1', 'gone-2', 'gone-3', 'gone-4']) {
      const m = group.member(id);
      await m.join();
      await m.leave();
    }
    await keeper.heartbeat();
    const ids = (await group.describe()).members.map((m) => `${m.memberId}:${m.state}`);
    expect(ids).toEqual(['gone-3:LEFT', 'gone-4:LEFT', 'keeper:ACTIVE']);
    expect(await eventsOf(group, 'MEMBER_FORGOTTEN')).toHaveLength(2);
  });

  it('forgets records older than retentionMs', async () => {
    const group = await aGroup(redis, 2, { retentionMs: 100 });
    const keeper = group.member('keeper');
    await keeper.join();
    const leaver = group.member('leaver');
    await leaver.join();
    await leaver.leave();
    expect((await group.describe()).members.map((m) => m.state)).toEqual(['ACTIVE', 'LEFT']);
    await pollUntil('the LEFT record to be forgotten', async () => {
      await keeper.heartbeat();
      return (await group.describe()).members.length === 1;
    });
  });

  it('a retained member that rejoins keeps its epoch history: its epoch only grows', async () => {
    const group = await aGroup(redis, 2);
    const a = group.member('a');
    await a.join();
    const b = group.member('b');
    await b.join();
    await settle([a, b]);
    const epochBefore = b.memberEpoch;
    await b.leave();
    await settle([a]);
    await b.join();
    await settle([a, b]);
    expect(b.memberEpoch).toBeGreaterThan(epochBefore);
  });
});
