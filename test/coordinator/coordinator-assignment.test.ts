import { describe, expect, it } from 'vitest';
import { ErrorCode, InvalidAssignmentError, type ShardAssignor } from '@redis-stream-coordinator/core';
import { aGroup, type GroupFixture, ownership } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { type ProtocolMember, settle } from '@redis-stream-coordinator/core/testing';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

async function joinAll(group: GroupFixture, ids: string[], weights: Record<string, number> = {}): Promise<ProtocolMember[]> {
  const members = ids.map((id) => group.member(id, { weight: weights[id] ?? 1 }));
  for (const member of members) await member.join();
  await settle(members);
  return members;
}

function moved(before: Record<string, number[]>, after: Record<string, number[]>): number[] {
  const ownerBefore = new Map(Object.entries(before).flatMap(([id, shards]) => shards.map((s) => [s, id] as const)));
  return Object.entries(after)
    .flatMap(([id, shards]) => shards.filter((s) => ownerBefore.get(s) !== id))
    .sort((a, b) => a - b);
}

async function targetEvents(group: GroupFixture): Promise<number> {
  const events = await redis.client().xrange(group.coordinator.keys.groupEvents(group.streamPrefix, group.consumerGroup), '-', '+');
  return events.filter(([, fields]) => fields[1] === 'TARGET_COMMITTED').length;
}

describe('sticky assignment through Redis (SPEC section 4)', () => {
  it('20 shards: 4 -> 5 members moves exactly 4 shards; 5 -> 4 moves only the departed member shards', async () => {
    const group = await aGroup(redis, 20);
    const members = await joinAll(group, ['m1', 'm2', 'm3', 'm4']);
    const withFour = ownership(await group.describe());
    expect(Object.values(withFour).map((s) => s.length)).toEqual([5, 5, 5, 5]);

    const fifth = group.member('m5');
    await fifth.join();
    await settle([...members, fifth]);
    const withFive = ownership(await group.describe());
    expect(moved(withFour, withFive)).toHaveLength(4);
    expect(withFive.m5).toHaveLength(4);
    expect(Object.values(withFive).map((s) => s.length)).toEqual([4, 4, 4, 4, 4]);

    await members[1].leave();
    await settle([members[0], members[2], members[3], fifth]);
    const afterLeave = ownership(await group.describe());
    expect(moved(withFive, afterLeave)).toEqual(withFive.m2);
    const loads = Object.values(afterLeave).map((s) => s.length);
    expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(1);
  });

  it('weights 2:1:1 give 10/5/5 of 20 shards', async () => {
    const group = await aGroup(redis, 20);
    await joinAll(group, ['heavy', 'light-1', 'light-2'], { heavy: 2 });
    const owned = ownership(await group.describe());
    expect([owned.heavy.length, owned['light-1'].length, owned['light-2'].length]).toEqual([10, 5, 5]);
  });

  it('the same input gives the same output: two groups with the same history end the same', async () => {
    const first = await aGroup(redis, 13);
    const second = await aGroup(redis, 13);
    for (const group of [first, second]) await joinAll(group, ['c', 'a', 'd', 'b']);
    expect(ownership(await first.describe())).toEqual(ownership(await second.describe()));
  });

  it('every readable shard is in exactly one member target, and max - min <= 1', async () => {
    const group = await aGroup(redis, 17);
    await joinAll(group, ['a', 'b', 'c', 'd', 'e']);
    const { targetAssignment } = await group.describe();
    const shards = Object.values(targetAssignment.members)
      .flat()
      .map((s) => s.shardIndex)
      .sort((a, b) => a - b);
    expect(shards).toEqual(Array.from({ length: 17 }, (_, i) => i));
    const loads = Object.values(targetAssignment.members).map((s) => s.length);
    expect(Math.max(...loads) - Math.min(...loads)).toBe(1);
  });
});

describe('committing a target (compare-and-set)', () => {
  it('a target computed for a stale groupEpoch is refused and changes nothing', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a');
    await a.join();
    const hold = group.client({ assignmentDelayMs: 3_600_000 });
    await group.member('b', {}, hold).join();
    const asked = await group.coordinator.heartbeatOnce(a.request());
    expect(asked.computeAssignment).toBe(true);
    const input = asked.assignmentInput!;

    await group.member('c', {}, hold).join(); // the input changes while a computes
    const before = await group.describe();
    const commit = await group.coordinator.commitAssignment(a.request({ memberEpoch: asked.memberEpoch }), input.groupEpoch, {
      a: [0, 1],
      b: [2, 3],
    });
    expect(commit.commitResult).toBe(ErrorCode.STALE_GROUP_EPOCH);
    expect(commit.commitMessage).toMatch(/computed for groupEpoch 2 but the group is at groupEpoch 3/);
    const after = await group.describe();
    expect(after.targetAssignment).toEqual(before.targetAssignment);
    expect(after.group.assignmentEpoch).toBe(before.group.assignmentEpoch);
    // the committer is asked again, for the current epoch
    expect(commit.response.computeAssignment).toBe(true);
    expect(commit.response.assignmentInput!.groupEpoch).toBe(3);
  });

  it.each([
    ['a shard assigned twice', { a: [0, 1, 2], b: [2, 3] }, /shard 2 is assigned to both/],
    ['a shard assigned to nobody', { a: [0, 1], b: [2] }, /readable shard 3 is assigned to no member/],
    ['a member that is not ACTIVE', { a: [0, 1], ghost: [2, 3] }, /member ghost is not an ACTIVE member/],
    ['a shard outside the readable set', { a: [0, 1, 9], b: [2, 3] }, /outside the readable shard set/],
    ['a negative shard index', { a: [-1, 0, 1], b: [2, 3] }, /negative shard index/],
    ['a fractional shard index', { a: [0, 1, 1.5], b: [2, 3] }, /not a strictly ascending list of shard indices/],
    ['a list that is not numbers', { a: ['x'] as unknown as number[], b: [0, 1, 2, 3] }, /not a set of shard index lists/],
  ])('a target with %s is refused and changes nothing', async (_name, plan, message) => {
    const group = await aGroup(redis, 4);
    const a = group.member('a');
    await a.join();
    await group.member('b', {}, group.client({ assignmentDelayMs: 3_600_000 })).join();
    const asked = await group.coordinator.heartbeatOnce(a.request());
    const before = await group.describe();
    const commit = await group.coordinator.commitAssignment(a.request({ memberEpoch: asked.memberEpoch }), asked.groupEpoch, plan);
    expect(commit.commitResult).toBe(ErrorCode.INVALID_ASSIGNMENT);
    expect(commit.commitMessage).toMatch(message);
    const after = await group.describe();
    expect(after.targetAssignment).toEqual(before.targetAssignment);
    expect(after.group.assignmentEpoch).toBe(before.group.assignmentEpoch);
  });

  it('an assignor that breaks invariant 5 is named in the error', async () => {
    const broken: ShardAssignor = { name: 'forgetful', assign: ({ members }) => ({ [members[0].memberId]: [0] }) };
    const group = await aGroup(redis, 4, { assignor: broken });
    await expect(group.member('a').join()).rejects.toThrow(InvalidAssignmentError);
    await expect(group.member('a').join()).rejects.toThrow(
      /assignor "forgetful" broke invariant 5: readable shard 1 is assigned to no member/,
    );
  });

  it('when the member computing the target dies, its lease runs out and another member is asked', async () => {
    const group = await aGroup(redis, 4, { assignmentTimeoutMs: 150 });
    const a = group.member('a');
    await a.join();
    const b = group.member('b', {}, group.client({ assignmentDelayMs: 3_600_000, assignmentTimeoutMs: 150 }));
    await b.join();
    const asked = await group.coordinator.heartbeatOnce(a.request());
    expect(asked.computeAssignment).toBe(true); // ... and a never commits

    const other = await group.coordinator.heartbeatOnce(group.member('b').request({ memberEpoch: 0 }));
    expect(other.computeAssignment).toBe(false);
    const taken = await pollUntil('b to be asked once the lease ran out', async () => {
      const response = await group.coordinator.heartbeat(b.request());
      return response.state !== 'ASSIGNING' && response;
    });
    expect(taken.assignmentEpoch).toBe(taken.groupEpoch);
  });

  it('assignmentDelayMs batches a burst of joins into one target computation', async () => {
    const group = await aGroup(redis, 16, { assignmentDelayMs: 1500 });
    const members = Array.from({ length: 8 }, (_, i) => group.member(`burst-${i}`));
    for (const member of members) await member.join();
    expect((await group.describe()).group.state).toBe('ASSIGNING');
    await pollUntil('the delayed target', async () => (await members[0].heartbeat()).state !== 'ASSIGNING');
    await settle(members);
    expect(await targetEvents(group)).toBe(1);
    expect(Object.values(ownership(await group.describe())).map((s) => s.length)).toEqual(Array(8).fill(2));
  });
});
