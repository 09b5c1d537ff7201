import { describe, expect, it } from 'vitest';
import { GroupNotFoundError } from '@redis-stream-coordinator/core';
import { aGroup } from '../support/group-fixture';
import { settle } from '@redis-stream-coordinator/core/testing';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

/** A coordinator client that never computes a target, to hold a group in ASSIGNING. */
const HOLD_ASSIGNING = { assignmentDelayMs: 3_600_000 };

describe('group state machine (SPEC 2.2), observed through describeGroup', () => {
  it('a group does not exist before its first member', async () => {
    const group = await aGroup(redis, 4);
    await expect(group.describe()).rejects.toBeInstanceOf(GroupNotFoundError);
  });

  it('EMPTY -> ASSIGNING when the first member joins', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a', {}, group.client(HOLD_ASSIGNING));
    await a.join();
    const { group: meta } = await group.describe();
    expect(meta).toMatchObject({ state: 'ASSIGNING', groupEpoch: 1, assignmentEpoch: 0 });
  });

  it('ASSIGNING -> RECONCILING -> STABLE: a target is committed, then members revoke and take over', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a');
    await a.join();
    expect(a.owned).toEqual([0, 1, 2, 3]);
    expect((await group.describe()).group.state).toBe('STABLE');

    const b = group.member('b', {}, group.client(HOLD_ASSIGNING));
    await b.join();
    expect((await group.describe()).group.state).toBe('ASSIGNING');

    // a's heartbeat gets the assignment lease and commits: a must give up two shards first
    const answer = await a.heartbeat();
    expect(answer.revokeShards).toEqual([2, 3]);
    expect((await group.describe()).group).toMatchObject({ state: 'RECONCILING', assignmentEpoch: 2 });

    const stable = await settle([a, b]);
    expect(stable.state).toBe('STABLE');
    expect([a.owned, b.owned]).toEqual([
      [0, 1],
      [2, 3],
    ]);
  });

  it('STABLE -> ASSIGNING on a join, a leave and a weight change', async () => {
    const group = await aGroup(redis, 4);
    const hold = group.client(HOLD_ASSIGNING);
    const a = group.member('a');
    const b = group.member('b');
    await a.join();
    await b.join();
    await settle([a, b]);

    const c = group.member('c', {}, hold);
    await c.join();
    expect((await group.describe()).group.state).toBe('ASSIGNING');
    await settle([a, b, c]);

    await c.leave();
    expect((await group.describe()).group.state).toBe('ASSIGNING');
    await settle([a, b]);

    const before = (await group.describe()).group.groupEpoch;
    await group.member('b', { weight: 3 }, hold).send({ memberEpoch: b.memberEpoch, owned: b.owned });
    expect((await group.describe()).group).toMatchObject({ state: 'ASSIGNING', groupEpoch: before + 1 });
  });

  it('RECONCILING -> ASSIGNING when another member joins before convergence', async () => {
    const group = await aGroup(redis, 6);
    const a = group.member('a');
    await a.join();
    await group.member('b').join(); // commits a target in which a must revoke: RECONCILING
    expect((await group.describe()).group.state).toBe('RECONCILING');
    await group.member('c', {}, group.client(HOLD_ASSIGNING)).join();
    expect((await group.describe()).group.state).toBe('ASSIGNING');
  });

  it('STABLE -> EMPTY when the last member leaves', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a');
    await a.join();
    expect((await group.describe()).group.state).toBe('STABLE');
    await a.leave();
    const description = await group.describe();
    expect(description.group.state).toBe('EMPTY');
    expect(description.members).toMatchObject([{ memberId: 'a', state: 'LEFT', currentAssignment: [] }]);
    expect(description.shards.every((s) => s.owner === null && s.state === 'UNOWNED')).toBe(true);
  });

  it('describeGroup returns the JSON shapes of SPEC section 2 exactly', async () => {
    const group = await aGroup(redis, 2);
    const a = group.member('018f8d27-8d71-7a7c-a7e7-b3f77c613d7f-m0', {
      memberName: 'summary-consumer-a',
      runtimeMaxConcurrency: 12,
      activeConsumerWorkers: 8,
    });
    await a.join();
    const description = await group.describe();
    const isoTime = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
    expect(Object.keys(description).sort()).toEqual(['group', 'members', 'shards', 'targetAssignment']);
    expect(description.group).toEqual({
      streamPrefix: group.streamPrefix,
      consumerGroup: 'group',
      groupEpoch: 1,
      metadataVersion: 1,
      assignmentEpoch: 1,
      state: 'STABLE',
      shardCount: 2,
      readableShardSet: [0, 1],
      updatedAt: expect.stringMatching(isoTime),
      cutoverInProgress: false,
      notYetReadableBacklog: 0,
      scheduled: 0,
      deferred: 0,
      parked: 0,
      nextDueAt: { scheduled: null, deferred: null },
      describedAt: expect.any(Number),
    });
    expect(description.members).toEqual([
      {
        memberId: '018f8d27-8d71-7a7c-a7e7-b3f77c613d7f-m0',
        memberName: 'summary-consumer-a',
        state: 'ACTIVE',
        memberEpoch: 1,
        metadataVersion: 0,
        runtimeMaxConcurrency: 12,
        activeConsumerWorkers: 8,
        weight: 1,
        currentAssignment: [{ shardIndex: 0 }, { shardIndex: 1 }],
        revoking: [],
        lastHeartbeatAt: expect.stringMatching(isoTime),
        memberLeaseExpiresAt: expect.stringMatching(isoTime),
        // A dynamic member: no instance id, never departed (static members: static-membership.test.ts).
        memberInstanceId: null,
        departedAt: null,
        awaitedUntil: null,
        unprovenSince: null,
      },
    ]);
    const member = description.members[0];
    expect(Date.parse(member.memberLeaseExpiresAt) - Date.parse(member.lastHeartbeatAt)).toBe(15_000);
    expect(description.targetAssignment).toEqual({
      streamPrefix: group.streamPrefix,
      consumerGroup: 'group',
      assignmentEpoch: 1,
      groupEpoch: 1,
      members: { '018f8d27-8d71-7a7c-a7e7-b3f77c613d7f-m0': [{ shardIndex: 0 }, { shardIndex: 1 }] },
    });
    expect(description.shards).toEqual([
      {
        shardIndex: 0,
        readability: 'readable',
        owner: '018f8d27-8d71-7a7c-a7e7-b3f77c613d7f-m0',
        state: 'OWNED',
        lag: 0,
        pending: 0,
        backlog: 0,
        scheduled: 0,
        deferred: 0,
        nextDueAt: { scheduled: null, deferred: null },
        parked: 0,
      },
      {
        shardIndex: 1,
        readability: 'readable',
        owner: '018f8d27-8d71-7a7c-a7e7-b3f77c613d7f-m0',
        state: 'OWNED',
        lag: 0,
        pending: 0,
        backlog: 0,
        scheduled: 0,
        deferred: 0,
        nextDueAt: { scheduled: null, deferred: null },
        parked: 0,
      },
    ]);
  });
});
