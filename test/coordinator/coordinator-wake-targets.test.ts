import { afterEach, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { settle } from '@redis-stream-coordinator/core/testing';
import { wakeUpIsFor } from '../../packages/core/src/redis/read-hubs/wake-hub';
import { aGroup, type GroupFixture } from '../support/group-fixture';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const listeners: Redis[] = [];
afterEach(() => {
  for (const listener of listeners.splice(0)) listener.disconnect();
});

/** Every message published on the group's wake channel from now on, in order. */
async function wakeUps(group: GroupFixture): Promise<string[]> {
  const heard: string[] = [];
  const listener = redis.client();
  listeners.push(listener);
  listener.on('message', (_channel: string, message: string) => heard.push(message));
  await listener.subscribe(group.coordinator.keys.groupWakeChannel(group.streamPrefix, group.consumerGroup));
  return heard;
}

/** memberId -> its target, from a description. */
async function targets(group: GroupFixture): Promise<Record<string, number[]>> {
  const description = await group.describe();
  return Object.fromEntries(
    Object.entries(description.targetAssignment.members).map(([id, shards]) => [id, shards.map((s) => s.shardIndex)]),
  );
}

describe('wake-ups name the members they are for (lua/includes/wake.lua)', () => {
  it('a join: the commit wakes only the members whose target changed, each release only the member waiting for the shard', async () => {
    const group = await aGroup(redis, 9);
    const members = ['m1', 'm2', 'm3'].map((id) => group.member(id));
    for (const member of members) await member.join();
    await settle(members);
    const before = await targets(group);
    const heard = await wakeUps(group);

    const joiner = group.member('m4');
    await joiner.join(); // joins, computes the target and commits it (CoordinatorClient.heartbeat)
    const after = await targets(group);
    const changed = ['m1', 'm2', 'm3'].filter((id) => JSON.stringify(before[id]) !== JSON.stringify(after[id]));
    expect(changed).toHaveLength(2); // 9 shards over 4 members: two members give one shard each, one keeps its 3
    await pollUntil('the commit wake-up heard', async () => heard.length === 1);
    expect(heard[0].split(' ').sort()).toEqual(['m4', ...changed].sort());

    await settle([...members, joiner]);
    // One wake-up per release, each for the joiner only (the shards it waits for), none for everyone.
    await pollUntil('the release wake-ups heard', async () => heard.length === 3);
    expect(heard.slice(1).map((message) => message.split(' ').slice(1))).toEqual([['m4'], ['m4']]);
    expect(heard.map((message) => message.split(' ').length > 1)).toEqual([true, true, true]);
    expect(joiner.owned).toHaveLength(2);
  });

  it('a leave still wakes everyone but the leaver: someone must compute the next target', async () => {
    const group = await aGroup(redis, 4);
    const members = ['m1', 'm2'].map((id) => group.member(id));
    for (const member of members) await member.join();
    await settle(members);
    const heard = await wakeUps(group);
    await members[1].leave();
    await pollUntil('the leave wake-up heard', async () => heard.length === 1);
    expect(heard).toEqual(['m2']);
    expect(wakeUpIsFor(heard[0], 'm1')).toBe(true);
    expect(wakeUpIsFor(heard[0], 'm2')).toBe(false);
  });

  it('a commit for more members than one message names (64) is split: every changed member is named once', async () => {
    // Members join without anyone computing a target (a day-long assignment delay), then one commits
    // the first target: every member's target changed, 65 besides the committer.
    const group = await aGroup(redis, 66);
    const holding = group.client({ assignmentDelayMs: 86_400_000 });
    const ids = Array.from({ length: 66 }, (_, i) => `m${String(i).padStart(2, '0')}`);
    const members = ids.map((id) => group.member(id, {}, holding));
    for (const member of members) await member.join();
    const heard = await wakeUps(group);
    const committer = group.member('m00');
    Object.assign(committer, { memberEpoch: members[0].memberEpoch });
    await committer.heartbeat();
    await pollUntil('the commit wake-ups heard', async () => heard.length === 2);
    const named = heard.flatMap((message) => {
      const [publisher, ...targets] = message.split(' ');
      expect(publisher).toBe('m00');
      return targets;
    });
    expect(heard.map((message) => message.split(' ').length - 1)).toEqual([64, 1]);
    expect(named.sort()).toEqual(ids.slice(1));
  });
});

describe('wakeUpIsFor', () => {
  it('reads the publisher and the members named: none named is everyone but the publisher', () => {
    expect(wakeUpIsFor('m1', 'm2')).toBe(true);
    expect(wakeUpIsFor('m1', 'm1')).toBe(false);
    expect(wakeUpIsFor('m1 m2 m3', 'm3')).toBe(true);
    expect(wakeUpIsFor('m1 m2 m3', 'm4')).toBe(false);
    expect(wakeUpIsFor('cutover', 'm4')).toBe(true);
  });
});
