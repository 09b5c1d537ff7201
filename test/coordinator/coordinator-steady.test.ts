import { describe, expect, it } from 'vitest';
import { settle } from '@redis-stream-coordinator/core/testing';
import { aGroup } from '../support/group-fixture';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();

/** Calls per Redis command since `CONFIG RESETSTAT`, scripts' inner commands included. */
async function commandCalls(): Promise<Map<string, number>> {
  const info = await redis.client().info('commandstats');
  return new Map([...info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].map(([, command, calls]) => [command, Number(calls)]));
}

describe('the steady-state heartbeat', () => {
  it('in a STABLE group writes only the caller lease (ZADD) and decodes nothing else', async () => {
    const group = await aGroup(redis, 12);
    // With instance ids, as CoordinatedMember sends them: part of the signature.
    const members = ['a', 'b', 'c'].map((id) => group.member(id, { instanceId: `instance-${id}` }));
    for (const m of members) await m.join();
    await settle(members);
    await members[0].heartbeat(); // every member has heard its current epoch

    await redis.client().config('RESETSTAT');
    for (let round = 0; round < 10; round++) for (const m of members) await m.heartbeat();
    const calls = await commandCalls();
    const writes = [...calls.keys()].filter((c) => /^(hset|hdel|sadd|srem|xadd|del|zrem|hincrby)$/.test(c));
    expect(writes).toEqual([]);
    expect(calls.get('zadd')).toBe(30);
    expect(calls.get('hget')).toBe(30); // the steady signature, not the member record
    expect(members.every((m) => m.last?.state === 'STABLE')).toBe(true);
  });

  it('a changed field takes the full path and is recorded', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a', { activeConsumerWorkers: 1 });
    await a.join();
    await a.heartbeat();
    const answer = await a.heartbeat({ activeConsumerWorkers: 3 });
    expect(answer.assignedShards).toEqual([0, 1, 2, 3]);
    expect((await group.describe()).members[0].activeConsumerWorkers).toBe(3);
  });

  it('the steady answer equals the full answer', async () => {
    const group = await aGroup(redis, 4);
    const a = group.member('a', { instanceId: 'instance-a' });
    const b = group.member('b');
    await a.join();
    await b.join();
    await settle([a, b]);
    const full = await a.heartbeat({ activeConsumerWorkers: 2 }); // a changed field: the full path
    await redis.client().config('RESETSTAT');
    const steady = await a.heartbeat({ activeConsumerWorkers: 2 });
    expect((await commandCalls()).get('hset')).toBeUndefined(); // it was the steady path
    // Each answer says when it ran in Redis: the one field they may not share.
    expect(steady.serverTimeMs).toBeGreaterThanOrEqual(full.serverTimeMs!);
    expect({ ...steady, serverTimeMs: 0 }).toEqual({ ...full, serverTimeMs: 0 });
  });
});
