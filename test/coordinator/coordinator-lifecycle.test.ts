import { describe, expect, it } from 'vitest';
import { ErrorCode } from '@redis-stream-coordinator/core';
import { settle } from '@redis-stream-coordinator/core/testing';
import { aGroup, ownership } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

/** Resolves once `ms` have passed since `since` (performance.now()): the scenario's clock, polled. */
function at(since: number, ms: number, what: string): Promise<true> {
  return pollUntil(what, async () => performance.now() - since >= ms, { intervalMs: 5 });
}

describe('revocation deadlines (SPEC 3: each revocation counts from when it was asked)', () => {
  it('each revocation counts from when it was asked: a second one acknowledged 0.8 s after it was asked, 2.3 s after the first, is accepted', async () => {
    const group = await aGroup(redis, 6);
    const a = group.member('a', { rebalanceTimeoutMs: 2000 });
    await a.join();
    await settle([a]);
    expect(a.owned).toEqual([0, 1, 2, 3, 4, 5]);

    await group.member('b').join();
    await a.heartbeat({ ackedRevocations: [] });
    const firstAskedAt = performance.now();
    const first = [...a.revoking];
    expect(first).toHaveLength(3);

    await at(firstAskedAt, 1500, 'the first revocation to be 1.5 s old');
    await group.member('c').join();
    await group.member('d').join();
    // Acknowledges the first revocation; the same answer asks for the next one.
    expect((await a.heartbeat({ ackedRevocations: first })).errorCode).toBe(ErrorCode.NONE);
    const secondAskedAt = performance.now();
    const second = [...a.revoking];
    expect(second.length).toBeGreaterThan(0);
    expect(second.some((shard) => first.includes(shard))).toBe(false);

    await at(secondAskedAt, 800, 'the second revocation to be 0.8 s old');
    expect(performance.now() - firstAskedAt).toBeGreaterThan(2000);
    const acked = await a.heartbeat({ ackedRevocations: second });
    expect(acked.errorCode).toBe(ErrorCode.NONE);
    expect((await group.describe()).members.find((m) => m.memberId === 'a')!.state).toBe('ACTIVE');
  });

  it('the deadline still holds for the earliest outstanding revocation', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a', { rebalanceTimeoutMs: 300 });
    await a.join();
    await settle([a]);
    await group.member('b').join();
    await a.heartbeat({ ackedRevocations: [] });
    expect(a.revoking).toHaveLength(2);
    const refused = await pollUntil('a to be removed for its unacknowledged revocation', async () => {
      const response = await a.send({ ackedRevocations: [] });
      return response.errorCode === ErrorCode.UNKNOWN_MEMBER_ID && response;
    });
    expect(refused.errorMessage).toMatch(/not an active member/);
  });
});

describe('a stale member is told it is stale before its report is checked (docs/protocol.md, One heartbeat, step 2)', () => {
  it('an expired member reporting shards the stream no longer has gets UNKNOWN_MEMBER_ID, not INVALID_REQUEST', async () => {
    const group = await aGroup(redis, 4);
    const paused = group.member('paused', { sessionTimeoutMs: 200 });
    const b = group.member('b');
    await paused.join();
    await b.join();
    await settle([paused, b]);
    await pollUntil('paused to expire', async () => {
      await b.heartbeat();
      return (await group.describe()).members.find((m) => m.memberId === 'paused')!.state === 'EXPIRED';
    });
    // Shard 9 is beyond the stream's span, as after a shrink and deleteDrainedShards.
    const response = await paused.send({ owned: [1, 9], revoking: [9], ackedRevocations: [9] });
    expect(response.errorCode).toBe(ErrorCode.UNKNOWN_MEMBER_ID);
    // A member at its current epoch still gets INVALID_REQUEST for a bad list, naming the field.
    const invalid = await b.send({ owned: [9] });
    expect(invalid.errorCode).toBe(ErrorCode.INVALID_REQUEST);
    expect(invalid.errorMessage).toMatch(/owned: shard index 9/);
  });
});

describe('one live instance per member id (SPEC 9.4)', () => {
  it('a join from another instance while the member is live is refused with FENCED_INSTANCE_ID and changes nothing', async () => {
    const group = await aGroup(redis, 4);
    const first = group.member('same', { instanceId: 'instance-1' });
    await first.join();
    await settle([first]);
    const before = await group.describe();

    const second = group.member('same', { instanceId: 'instance-2' });
    const refused = await second.join();
    expect(refused.errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
    expect(refused.errorMessage).toMatch(/in use by another live instance/);
    // Nor may it end the first instance's membership by leaving.
    expect((await second.leave()).errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
    const after = await group.describe();
    expect(after.group).toEqual({ ...before.group, updatedAt: after.group.updatedAt });
    expect(ownership(after)).toEqual({ same: [0, 1, 2, 3] });
    // A heartbeat of the second instance that repeats the first one's exactly is not taken for it
    // (the instance id is part of the steady-state signature).
    const copy = await second.send({ ...first.request(), instanceId: second.extra.instanceId });
    expect(copy.errorCode).toBe(ErrorCode.FENCED_MEMBER_EPOCH);
    // The first instance is untouched and its steady heartbeats still work.
    expect((await first.heartbeat()).errorCode).toBe(ErrorCode.NONE);
    expect(first.owned).toEqual([0, 1, 2, 3]);
  });

  it('a new instance takes an expired id; the old one is then fenced, and its rejoin is refused', async () => {
    const group = await aGroup(redis, 2);
    const old = group.member('same', { instanceId: 'old', sessionTimeoutMs: 200 });
    const other = group.member('other');
    await old.join();
    await other.join();
    await settle([old, other]);
    const epochBefore = old.memberEpoch;
    await pollUntil('old to expire', async () => {
      await other.heartbeat();
      return (await group.describe()).members.find((m) => m.memberId === 'same')!.state === 'EXPIRED';
    });

    const fresh = group.member('same', { instanceId: 'new' });
    expect((await fresh.join()).errorCode).toBe(ErrorCode.NONE);
    await settle([fresh, other]);
    expect(fresh.memberEpoch).toBeGreaterThan(epochBefore);

    // The old instance comes back with its old epoch and an empty report: fenced, not accepted as the new one.
    const fenced = await old.send({ memberEpoch: fresh.memberEpoch, owned: [] });
    expect(fenced.errorCode).toBe(ErrorCode.FENCED_MEMBER_EPOCH);
    expect(fenced.errorMessage).toMatch(/another instance/);
    // Nor may it commit a target in the new instance's name.
    const commit = await group.coordinator.commitAssignment(
      {
        streamPrefix: group.streamPrefix,
        consumerGroup: group.consumerGroup,
        memberId: 'same',
        memberEpoch: fresh.memberEpoch,
        instanceId: 'old',
      },
      fresh.last!.groupEpoch,
      { same: [0], other: [1] },
    );
    expect(commit.response.errorCode).toBe(ErrorCode.FENCED_MEMBER_EPOCH);
    expect((await old.join()).errorCode).toBe(ErrorCode.FENCED_INSTANCE_ID);
    // The same instance rejoins as before.
    expect((await fresh.join()).errorCode).toBe(ErrorCode.NONE);
    await settle([fresh, other]);
    expect(ownership(await group.describe()).same).toHaveLength(1);
  });
});

describe('group incarnations (SPEC 9.3)', () => {
  it('every answer carries the group incarnation; a recreated group gets a larger one', async () => {
    const group = await aGroup(redis, 2);
    const a = group.member('a');
    const joined = await a.join();
    const steady = await settle([a]);
    expect(joined.incarnation).toMatch(/^\d{16}$/);
    expect(steady.incarnation).toBe(joined.incarnation);
    const [, , ...groupKeys] = group.coordinator.keys.groupKeys(group.streamPrefix, group.consumerGroup);
    await redis.client().del(...groupKeys);
    const rejoined = await a.join();
    expect(rejoined.errorCode).toBe(ErrorCode.NONE);
    expect(BigInt(rejoined.incarnation)).toBeGreaterThan(BigInt(joined.incarnation));
  });
});
