import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, FencedInstanceIdError, StreamProducer } from '@redis-stream-coordinator/core';
import { HandlerRecorder, keyedMessages } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Static membership with the real member runtime (docs/runtime.md, Static membership): restarts keep shards in place.
const redis = useRedisServer();
const aMember = memberFactory(redis, { coordinator: { heartbeatIntervalMs: 100 } });

async function ownershipOf(streamPrefix: string) {
  const description = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
  return {
    description,
    owners: Object.fromEntries(
      description.members.filter((m) => m.state === 'ACTIVE').map((m) => [m.memberId, m.currentAssignment.map((s) => s.shardIndex)]),
    ),
  };
}

async function stable(streamPrefix: string, shardCount: number) {
  return pollUntil('a STABLE group with every shard owned', async () => {
    const { description, owners } = await ownershipOf(streamPrefix);
    return description.group.state === 'STABLE' && Object.values(owners).flat().length === shardCount && owners;
  });
}

describe('static membership: CoordinatedMember with memberInstanceId', () => {
  it('a rolling restart of 4 members under load moves no shard, revokes nothing, and handles every entry once in key order', async () => {
    const streamPrefix = uniqueName('rolling');
    const recorder = new HandlerRecorder();
    const revoked: string[] = [];
    const start = (id: string) => {
      const member = aMember({ streamPrefix, memberInstanceId: id, shardCount: 8, sessionTimeoutMs: 5000, handler: recorder.handler(id) });
      member.on('revoked', (event) => revoked.push(`${id}:${event.shards.join(',')}`));
      return member;
    };
    const members = ['s0', 's1', 's2', 's3'].map(start);
    await Promise.all(members.map((m) => m.start()));
    const before = await stable(streamPrefix, 8);
    revoked.length = 0; // the four joins' own rebalance is not the restart's
    const eventsBefore = (await new CoordinatorAdmin(redis.client()).readGroupEvents(streamPrefix, 'group', { count: 1000 })).length;

    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const messages = keyedMessages(40, 20);
    let sent = 0;
    const send = async (n: number) => {
      await producer.sendBatch(messages.slice(sent, sent + n));
      sent += n;
    };
    for (let i = 0; i < 4; i++) {
      await send(100);
      await members[i].stop(); // departs: the coordinator keeps s<i>'s shards for its next instance
      members[i] = start(`s${i}`);
      await members[i].start();
      expect(members[i].ownedShards()).toEqual(before[`s${i}`]);
    }
    await send(messages.length - sent);
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === messages.length, { timeoutMs: 20_000 });

    expect(revoked).toEqual([]);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
    expect((await ownershipOf(streamPrefix)).owners).toEqual(before);
    const events = (await new CoordinatorAdmin(redis.client()).readGroupEvents(streamPrefix, 'group', { count: 1000 })).slice(eventsBefore);
    expect(events.filter((e) => e.type === 'MEMBER_STATIC_REJOINED')).toHaveLength(4);
    expect(events.filter((e) => e.type === 'SHARDS_REVOKING' || e.type === 'MEMBER_LEFT')).toEqual([]);
  }, 30_000);

  it('after a crash the restarted instance takes the shards back, re-runs the entry that was in flight, and the others keep theirs', async () => {
    const streamPrefix = uniqueName('crash');
    const recorder = new HandlerRecorder();
    let hold: Promise<void> | undefined = new Promise<void>(() => undefined); // the first instance hangs in its handler
    const crashed = aMember({
      streamPrefix,
      memberInstanceId: 'crashy',
      shardCount: 2,
      sessionTimeoutMs: 10_000,
      handler: recorder.handler('crashy-1', () => hold),
    });
    const steady = aMember({
      streamPrefix,
      memberInstanceId: 'steady',
      shardCount: 2,
      sessionTimeoutMs: 10_000,
      handler: recorder.handler('steady'),
    });
    const steadyRevoked: number[] = [];
    steady.on('revoked', (event) => steadyRevoked.push(...event.shards));
    await Promise.all([crashed.start(), steady.start()]);
    const before = await stable(streamPrefix, 2);
    // Whichever joined first took both shards and handed one over: only what comes after counts.
    steadyRevoked.length = 0;
    const shard = before.crashy[0];
    await new StreamProducer(redis.client(), { streamPrefix }).send({ shardIndex: shard, payload: { seq: 1 }, key: 'k' });
    await pollUntil('the first instance to be in its handler', async () => crashed.stats().activeHandlers > 0);

    crashed.abort(); // as if the process died: no drain, no ack, no leave; its lease runs on
    hold = undefined;
    const restarted = aMember({
      streamPrefix,
      memberInstanceId: 'crashy',
      shardCount: 2,
      sessionTimeoutMs: 10_000,
      handler: recorder.handler('crashy-2'),
    });
    const startedAt = performance.now();
    await restarted.start();
    expect(performance.now() - startedAt).toBeLessThan(5000); // well within the 10 s session timeout
    await pollUntil('the pending entry to be re-run by the new instance', async () => recorder.runs.some((r) => r.memberId === 'crashy-2'));
    expect(restarted.ownedShards()).toEqual(before.crashy);
    expect(steadyRevoked).toEqual([]);
    expect((await ownershipOf(streamPrefix)).owners).toEqual(before);
  }, 30_000);

  it('a second live process with the same memberInstanceId is refused for good once it waited a session timeout', async () => {
    const streamPrefix = uniqueName('duplicate');
    // Heartbeats every 300 ms, so a takeover needs 600 ms of silence: with 100 ms (200 ms of silence)
    // one hiccup of a loaded machine let the second take over, twice in a run of 20 files.
    const twin = {
      streamPrefix,
      memberInstanceId: 'twin',
      shardCount: 2,
      sessionTimeoutMs: 1000,
      coordinator: { heartbeatIntervalMs: 300 },
      handler: () => undefined,
    };
    const first = aMember(twin);
    await first.start();
    const second = aMember(twin);
    await expect(second.start()).rejects.toBeInstanceOf(FencedInstanceIdError);
    expect(first.ownedShards()).toEqual([0, 1]);
  }, 15_000);

  it('stop({ leaveGroup: true }) leaves for good: the member is LEFT and its shards move at once, long before its session timeout', async () => {
    const streamPrefix = uniqueName('static-leave');
    const leaving = aMember({
      streamPrefix,
      memberInstanceId: 'leaving',
      shardCount: 2,
      sessionTimeoutMs: 20_000,
      handler: () => undefined,
    });
    const staying = aMember({
      streamPrefix,
      memberInstanceId: 'staying',
      shardCount: 2,
      sessionTimeoutMs: 20_000,
      handler: () => undefined,
    });
    await Promise.all([leaving.start(), staying.start()]);
    await stable(streamPrefix, 2);
    await leaving.stop({ leaveGroup: true });
    await pollUntil('the other member to own both shards', async () => staying.ownedShards().length === 2, { timeoutMs: 5000 });
    const { description } = await ownershipOf(streamPrefix);
    expect(description.members.find((m) => m.memberId === 'leaving')?.state).toBe('LEFT');
  });

  it('names the option when memberInstanceId is not a valid id, or disagrees with memberId', () => {
    expect(() => aMember({ streamPrefix: 'x', memberInstanceId: 'has space', handler: () => undefined })).toThrow(/memberInstanceId/);
    expect(() => aMember({ streamPrefix: 'x', memberInstanceId: 'a', memberId: 'b', handler: () => undefined })).toThrow(
      /memberInstanceId "a"/,
    );
  });
});
