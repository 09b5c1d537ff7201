import { describe, expect, it } from 'vitest';
import { ErrorCode, type HeartbeatRequest, type HeartbeatResponse } from '@redis-stream-coordinator/core';
import { type ProtocolMember, settle } from '@redis-stream-coordinator/core/testing';
import { aGroup, type GroupFixture, ownership } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

// SPEC 10.2 for a join: a join taken on a fresh answer proves the member's link, not that the
// answer to the join reaches it in time. Such a member is unproven (includes/unproven.lua): no
// shards, nothing revoked for it, no epoch moved for it, until a later request proves the join.
const redis = useRedisServer();

/**
 * A protocol-level member that says when its answers came, as CoordinatedMember does: here every
 * answer it is given counts as received in time (`heard`), unless the test keeps it back.
 */
function answering(member: ProtocolMember) {
  let answeredAt = 0;
  let acceptedAt = 0;
  const heard = (response: HeartbeatResponse): HeartbeatResponse => {
    if (response.serverTimeMs !== undefined) {
      answeredAt = response.serverTimeMs;
      if (response.errorCode === ErrorCode.NONE) acceptedAt = response.serverTimeMs;
    }
    return response;
  };
  return {
    member,
    heard,
    /** A heartbeat (a join while its epoch is 0) whose answer arrives in time. */
    beat: async (overrides: Partial<HeartbeatRequest> = {}) => heard(await member.heartbeat({ answeredAt, acceptedAt, ...overrides })),
    /** The same, but its answer never reaches the member (late): only Redis saw it. */
    beatUnheard: (overrides: Partial<HeartbeatRequest> = {}) => member.heartbeat({ answeredAt, acceptedAt, ...overrides }),
  };
}

/** Joins `memberId` with answers tracked: a first join refused (no answer yet), then the join taken on that refusal. */
async function joinUnproven(group: GroupFixture, memberId: string, extra: Partial<HeartbeatRequest> = {}) {
  const joiner = answering(group.member(memberId, extra));
  expect((await joiner.beat()).errorCode).toBe(ErrorCode.NO_TIMELY_ANSWER);
  const joined = await joiner.beat();
  expect(joined).toMatchObject({
    errorCode: ErrorCode.NONE,
    unproven: true,
    memberEpoch: 0,
    heartbeatIntervalMs: 1,
    computeAssignment: false,
  });
  return { joiner, joined };
}

/** The membership events of one member (MEMBER_*), in order. */
async function membershipEvents(group: GroupFixture, memberId: string): Promise<string[]> {
  const events = await group.admin.readGroupEvents(group.streamPrefix, group.consumerGroup, { count: 1000 });
  return events.filter((e) => e.memberId === memberId && e.type.startsWith('MEMBER_')).map((e) => e.type);
}

async function groupEpoch(group: GroupFixture): Promise<number> {
  return (await group.describe()).group.groupEpoch;
}

/** A group of `shardCount` shards whose one member, `a` (its answers not tracked), owns them all. */
async function aGroupOwnedByA(shardCount: number) {
  const group = await aGroup(redis, shardCount);
  const a = group.member('a');
  await a.join();
  await settle([a]);
  return { group, a };
}

describe('a join taken on a fresh answer is unproven until a later request shows its answer came in time', () => {
  it('gets no shards and moves no epoch; its next request in time proves it, and only then does it get its share', async () => {
    const { group, a } = await aGroupOwnedByA(4);
    const epochBefore = await groupEpoch(group);

    const { joiner, joined } = await joinUnproven(group, 'j');
    const description = await group.describe();
    expect(description.group.groupEpoch).toBe(epochBefore);
    expect(description.group.state).toBe('STABLE');
    const j = description.members.find((m) => m.memberId === 'j')!;
    expect(j).toMatchObject({ state: 'ACTIVE', currentAssignment: [], unprovenSince: new Date(joined.serverTimeMs!).toISOString() });
    // The others are not asked to revoke anything for it.
    expect((await a.heartbeat()).revokeShards).toEqual([]);
    expect(ownership(await group.describe()).a).toEqual([0, 1, 2, 3]);

    // The answer to its join reached it in time: the next request says so (acceptedAt) and proves it.
    const proven = await joiner.beat();
    expect(proven).toMatchObject({ errorCode: ErrorCode.NONE, unproven: false, groupEpoch: epochBefore + 1 });
    expect((await group.describe()).members.find((m) => m.memberId === 'j')!.unprovenSince).toBeNull();
    expect(await membershipEvents(group, 'j')).toEqual(['MEMBER_JOINED', 'MEMBER_JOIN_PROVEN']);
    await settle([a, joiner.member]);
    expect(ownership(await group.describe())).toEqual({ a: [0, 1], j: [2, 3] });
  });

  it('a request that does not show the answer to its join came in time is refused, and proves nothing', async () => {
    const { group } = await aGroupOwnedByA(2);
    const joiner = answering(group.member('j'));
    expect((await joiner.beat()).errorCode).toBe(ErrorCode.NO_TIMELY_ANSWER);
    // Redis takes the join, but its answer comes back late: the member never learns it.
    expect((await joiner.beatUnheard()).unproven).toBe(true);
    const refused = await joiner.beat();
    expect(refused.errorCode).toBe(ErrorCode.NO_TIMELY_ANSWER);
    expect((await group.describe()).members.find((m) => m.memberId === 'j')!.unprovenSince).not.toBeNull();
    expect(await membershipEvents(group, 'j')).toEqual(['MEMBER_JOINED']);
  });

  it('its expiry and its leave move no epoch: the others keep their shards and their epoch', async () => {
    const { group, a } = await aGroupOwnedByA(2);
    const epochBefore = await groupEpoch(group);
    const memberEpoch = a.memberEpoch;

    await joinUnproven(group, 'quiet', { sessionTimeoutMs: 200 });
    await pollUntil('the unproven member expired', async () => {
      await a.heartbeat();
      return (await group.describe()).members.find((m) => m.memberId === 'quiet')!.state === 'EXPIRED';
    });
    const { joiner: leaving } = await joinUnproven(group, 'leaving');
    expect((await leaving.member.leave()).errorCode).toBe(ErrorCode.NONE);

    const description = await group.describe();
    expect(description.group.groupEpoch).toBe(epochBefore);
    expect(description.members.find((m) => m.memberId === 'leaving')!.state).toBe('LEFT');
    expect(description.members.find((m) => m.memberId === 'quiet')!.unprovenSince).toBeNull();
    expect(await a.heartbeat()).toMatchObject({ memberEpoch, assignedShards: [0, 1], revokeShards: [], state: 'STABLE' });
  });

  it('is no part of the assignor input, and a target that names it is refused', async () => {
    const { group, a } = await aGroupOwnedByA(4);
    await joinUnproven(group, 'j');
    // Another member's join moves the epoch; the target is computed later (a long assignment delay).
    const b = group.member('b', {}, group.client({ assignmentDelayMs: 60_000 }));
    await b.join();
    const G = await groupEpoch(group);

    const commit = await group.coordinator.commitAssignment(
      { streamPrefix: group.streamPrefix, consumerGroup: group.consumerGroup, memberId: 'a', memberEpoch: a.memberEpoch },
      G,
      { a: [0, 1], b: [2], j: [3] },
    );
    expect(commit.commitResult).toBe(ErrorCode.INVALID_ASSIGNMENT);
    expect(commit.commitMessage).toContain('member j is not an ACTIVE member of the group (or its join is unproven)');
    const asked = await group.coordinator.heartbeatOnce(a.request());
    expect(asked.computeAssignment).toBe(true);
    expect(asked.assignmentInput!.members.map((m) => m.memberId)).toEqual(['a', 'b']);
  });

  it('a rejoin taken by the renewal rule (its last renewal answered in time) is proven at once, as before', async () => {
    const group = await aGroup(redis, 2);
    const { joiner } = await joinUnproven(group, 'a');
    // Proved, then beats (each answer in time) until it owns its target at a settled group.
    for (let round = 0; round < 10; round++) {
      const answer = await joiner.beat();
      if (answer.state === 'STABLE' && joiner.member.owned.length === 2) break;
    }
    expect(joiner.member.owned).toEqual([0, 1]);
    const epochBefore = await groupEpoch(group);

    // Same instance, live lease, acceptedAt covering its last renewal: a rejoin as before.
    const rejoined = await joiner.beat({ memberEpoch: 0, owned: [], ackedRevocations: [] });
    expect(rejoined).toMatchObject({ errorCode: ErrorCode.NONE, unproven: false, groupEpoch: epochBefore + 1 });
    expect(await membershipEvents(group, 'a')).toEqual(['MEMBER_JOINED', 'MEMBER_JOIN_PROVEN', 'MEMBER_REJOINED']);
  });
});
