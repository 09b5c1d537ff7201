import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { HandlerRecorder, keyedMessages } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import type { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.2: a late answer is not trusted for ownership, but Redis and the member agree on whether
// the member is alive: a member whose answers come back late is expired by Redis (and does not
// rejoin until its answers come in time), and no shard is left owned but unread.
const redis = useRedisServer();
const aMember = memberFactory(redis);
const aProxy = proxyFactory(redis);

function admin() {
  return new CoordinatorAdmin(redis.client());
}

async function groupEpoch(streamPrefix: string): Promise<number> {
  return (await admin().describeGroup(streamPrefix, 'group')).group.groupEpoch;
}

/** How many events of these types the group logged, of one member when `memberId` is given. */
async function eventCount(streamPrefix: string, types: string[], memberId?: string): Promise<number> {
  const events = await admin().readGroupEvents(streamPrefix, 'group', { count: 1000 });
  return events.filter((e) => types.includes(e.type) && (memberId === undefined || e.memberId === memberId)).length;
}

const expiries = (streamPrefix: string, memberId: string) => eventCount(streamPrefix, ['MEMBER_EXPIRED'], memberId);
const rejoins = (streamPrefix: string, memberId?: string) => eventCount(streamPrefix, ['MEMBER_REJOINED'], memberId);

/** A member on a fast link owning all 4 shards of a new stream, and the shards revoked from it from now on. */
async function aHealthyMemberOwningEveryShard(streamPrefix: string, recorder: HandlerRecorder) {
  const healthy = aMember({ streamPrefix, shardCount: 4, sessionTimeoutMs: 3000, handler: recorder.handler('healthy') });
  await healthy.start();
  await pollUntil('the healthy member owning every shard', async () => healthy.ownedShards().length === 4);
  const revoked: number[] = [];
  healthy.on('revoked', ({ shards }) => revoked.push(...shards));
  return { healthy, revoked };
}

/**
 * A member joining the stream over `proxy` (no shardCount: the stream exists, and start() goes
 * straight to joining), and what its start() came to: 'joined' or the error's message.
 */
function aJoinerOver(proxy: TcpProxy, streamPrefix: string, recorder: HandlerRecorder, name: string) {
  const joiner = aMember({ streamPrefix, sessionTimeoutMs: 3000, handler: recorder.handler(name) }, redis.clientAt(proxy.url));
  const started = joiner.start().then(
    () => 'joined',
    (error: Error) => error.message,
  );
  return { joiner, started };
}

/** Writes `rounds` batches of 16 keyed entries, one a second; resolves with how many it wrote. */
async function writeOneBatchASecond(streamPrefix: string, rounds: number): Promise<number> {
  const producer = new StreamProducer(redis.client(), { streamPrefix });
  for (let round = 0; round < rounds; round++) {
    await producer.sendBatch(keyedMessages(4, 4, `round-${round}`));
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  return rounds * 16;
}

/**
 * Heartbeat answers that Redis accepted reach the member `lateMs` late while `late()` says so;
 * refusals come at once (a link on which large answers, such as assignments, are slow).
 */
function delayAcceptedHeartbeatAnswers(client: Redis, lateMs: number, late: () => boolean): void {
  type Command = Parameters<Redis['sendCommand']>[0] & { name: string; args: unknown[] };
  const send = client.sendCommand.bind(client);
  client.sendCommand = ((command: Command, stream?: unknown) => {
    const sent = send(command, stream as never) as Promise<unknown>;
    // heartbeat-14: a script on 14 keys with at least 26 arguments (commitAssignment has fewer).
    const isHeartbeat =
      (command.name === 'evalsha' || command.name === 'eval') && String(command.args[1]) === '14' && command.args.length >= 40;
    if (!isHeartbeat) return sent;
    return sent.then(async (reply) => {
      if (late() && Array.isArray(reply) && Number(reply[0]) === 0) await new Promise((resolve) => setTimeout(resolve, lateMs));
      return reply;
    });
  }) as Redis['sendCommand'];
}

/**
 * A reply chunk with an accepted heartbeat answer: an array of 18 to 21 elements (the steady answer,
 * the full one, one with a commit's result) whose first, the error code, is 0.
 */
const acceptedHeartbeatAnswer = (reply: string) => /\*(18|19|20|21)\r\n:0\r\n/.test(reply);

describe('a member whose heartbeat answers come back late (requests in time)', () => {
  it('is expired by Redis, rejoins only once answers come in time, and its shards are read by the others meanwhile', async () => {
    const streamPrefix = uniqueName('late-answers');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    const slow = aMember(
      { streamPrefix, shardCount: 4, sessionTimeoutMs: 3000, handler: recorder.handler('slow') },
      redis.clientAt(proxy.url),
    );
    const healthy = aMember({ streamPrefix, shardCount: 4, sessionTimeoutMs: 3000, handler: recorder.handler('healthy') });
    await slow.start();
    await healthy.start();
    await pollUntil('two shards each', async () => slow.ownedShards().length === 2 && healthy.ownedShards().length === 2);
    const rejoinsBefore = await rejoins(streamPrefix);

    // Requests reach Redis at once; every answer comes back 1.5 s later, past the 1 s the member waits.
    proxy.delay('reply', 1500);
    await pollUntil(
      'the healthy member owning every shard, the slow one expired',
      async () => {
        const d = await admin().describeGroup(streamPrefix, 'group');
        const slowState = d.members.find((m) => m.memberId === slow.memberId)?.state;
        return healthy.ownedShards().length === 4 && slowState !== 'ACTIVE' && d.group.state === 'STABLE';
      },
      { timeoutMs: 10_000 },
    );
    // Settled for good while the fault lasts: no rejoin churns the group epoch.
    const epochSettled = await groupEpoch(streamPrefix);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(keyedMessages(16, 6, 'during'));
    await pollUntil('every entry sent during the fault handled', async () => recorder.distinctEntries() === 96, { timeoutMs: 10_000 });
    await new Promise((resolve) => setTimeout(resolve, 3000)); // a session more: the group stays as it is
    expect(await groupEpoch(streamPrefix)).toBe(epochSettled);
    expect(await rejoins(streamPrefix)).toBeLessThanOrEqual(rejoinsBefore);
    expect(slow.stats().joined).toBe(false);

    // Answers in time again: the member rejoins and gets its share back.
    proxy.clearFaults();
    await pollUntil('the slow member back with shards', async () => slow.ownedShards().length === 2 && healthy.ownedShards().length === 2, {
      timeoutMs: 10_000,
    });
    await slow.stop();
  });
});

describe('a member joining over a link whose answers come back late', () => {
  it('is not made a member: nothing is revoked from the others to it, and every entry is handled', async () => {
    const streamPrefix = uniqueName('late-join');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    const { revoked } = await aHealthyMemberOwningEveryShard(streamPrefix, recorder);

    proxy.delay('reply', 1500);
    const { joiner: slow, started } = aJoinerOver(proxy, streamPrefix, recorder, 'slow');
    const written = await writeOneBatchASecond(streamPrefix, 6);
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === written, { timeoutMs: 10_000 }).catch(
      async (error: Error) => {
        const d = await admin().describeGroup(streamPrefix, 'group');
        throw new Error(
          `${error.message}: ${recorder.distinctEntries()} handled; ${JSON.stringify(d.members.map((m) => [m.memberId, m.state]))}`,
        );
      },
    );
    expect(revoked).toEqual([]);
    const d = await admin().describeGroup(streamPrefix, 'group');
    expect(d.members.find((m) => m.memberId === slow.memberId)?.state).not.toBe('ACTIVE');

    proxy.clearFaults();
    expect(await started).toBe('joined');
    await pollUntil('the slow member with its share', async () => slow.ownedShards().length === 2, { timeoutMs: 10_000 });
    await slow.stop();
  });
});

describe('a member whose accepted heartbeat answers come back late while its refusals come in time', () => {
  it('is expired by Redis a session after its answers began to come late: a refusal received in time proves no renewal', async () => {
    const streamPrefix = uniqueName('late-accepted');
    const recorder = new HandlerRecorder();
    let late = false;
    const connection = redis.client();
    delayAcceptedHeartbeatAnswers(connection, 1500, () => late);
    const slow = aMember({ streamPrefix, shardCount: 4, sessionTimeoutMs: 3000, handler: recorder.handler('slow') }, connection);
    const healthy = aMember({ streamPrefix, shardCount: 4, sessionTimeoutMs: 3000, handler: recorder.handler('healthy') });
    await slow.start();
    await healthy.start();
    await pollUntil('two shards each', async () => slow.ownedShards().length === 2 && healthy.ownedShards().length === 2);

    // Accepted answers now come 1.5 s late, past the 1 s the member waits; refusals still in time.
    late = true;
    // Redis renews at most once more, then expires the member a session (3 s) later: well within 8 s.
    await pollUntil('Redis expiring the slow member', async () => (await expiries(streamPrefix, slow.memberId)) > 0, { timeoutMs: 8000 });
    await pollUntil('the healthy member owning every shard', async () => healthy.ownedShards().length === 4, { timeoutMs: 5000 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(keyedMessages(4, 4, 'during'));
    await pollUntil('every entry sent during the fault handled', async () => recorder.distinctEntries() === 16, { timeoutMs: 10_000 });

    late = false;
    await pollUntil('the slow member back with shards', async () => slow.ownedShards().length === 2 && healthy.ownedShards().length === 2, {
      timeoutMs: 10_000,
    });
    await slow.stop();
  });
});

describe('a member joining over a link whose accepted answers come back late while its refusals come in time', () => {
  it('gets no shard until an answer proves its join: the healthy member keeps every shard and handles every entry meanwhile', async () => {
    const streamPrefix = uniqueName('late-accepted-join');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    const { healthy, revoked } = await aHealthyMemberOwningEveryShard(streamPrefix, recorder);
    const epochBefore = await groupEpoch(streamPrefix);

    // Requests reach Redis at once, and so do refusals back; every accepted heartbeat answer (large:
    // it carries the assignment) comes 1.5 s late, past the 1 s the member waits.
    proxy.delayRepliesMatching(acceptedHeartbeatAnswer, 1500);
    const { joiner, started } = aJoinerOver(proxy, streamPrefix, recorder, 'joiner');
    // About three sessions of writes.
    const written = await writeOneBatchASecond(streamPrefix, 9);
    // Redis did take its joins: the joiner was a member at times, yet nothing moved to it.
    expect(await eventCount(streamPrefix, ['MEMBER_JOINED', 'MEMBER_REJOINED'], joiner.memberId)).toBeGreaterThan(0);
    await pollUntil('every entry written during the fault handled', async () => recorder.distinctEntries() === written, {
      timeoutMs: 3000,
    });
    expect(revoked).toEqual([]);
    expect(recorder.runs.filter((r) => r.memberId !== 'healthy')).toEqual([]);
    expect(await groupEpoch(streamPrefix)).toBe(epochBefore);

    // Answers in time again: the joiner proves its join and gets its share.
    proxy.clearFaults();
    expect(await started).toBe('joined');
    await pollUntil('the joiner with its share', async () => joiner.ownedShards().length === 2 && healthy.ownedShards().length === 2, {
      timeoutMs: 10_000,
    });
    await joiner.stop();
  });
});

describe('a member whose lease ran out for late answers, when its answers come in time but slowly', () => {
  it('is taken again: after the pause that two refusals in a row cost, a fresh refusal is sent on at once', async () => {
    const streamPrefix = uniqueName('slow-rejoin');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    const slow = aMember(
      { streamPrefix, shardCount: 2, sessionTimeoutMs: 3000, handler: recorder.handler('slow') },
      redis.clientAt(proxy.url),
    );
    const refusedInTime: string[] = [];
    slow.on('error', (error) => {
      if (error.message.includes('got no accepted answer in time')) refusedInTime.push(error.message);
    });
    await slow.start();
    await pollUntil('the member owning both shards', async () => slow.ownedShards().length === 2);

    // Accepted answers come back 1.5 s late, past the 1 s the member waits, refusals in 800 ms: its
    // heartbeats are refused in time, two in a row (each pair costs a pause of about 600 ms, and is
    // an error), and it gives its lease up. It is alone: no other member's call expires it, nor
    // wakes it up.
    proxy.delay('reply', 800);
    proxy.delayRepliesMatching(acceptedHeartbeatAnswer, 700);
    await pollUntil(
      'the member giving its lease up, refused in time twice in a row',
      async () => slow.ownedShards().length === 0 && refusedInTime.length > 0,
      {
        timeoutMs: 10_000,
      },
    );
    // Every answer late, until its lease in Redis has run out: no join can be taken meanwhile.
    proxy.clearFaults();
    proxy.delay('reply', 1500);
    await pollUntil('its lease in Redis run out', async () => {
      const member = (await admin().describeGroup(streamPrefix, 'group')).members.find((m) => m.memberId === slow.memberId);
      return member !== undefined && Date.parse(member.memberLeaseExpiresAt) < Date.now();
    });
    const rejoinsBefore = await rejoins(streamPrefix, slow.memberId);

    // Now every answer comes in time, after 800 ms. A refusal proves the link for 1 s from when Redis
    // ran it: a join sent only after a pause would find that proof stale every time.
    proxy.clearFaults();
    proxy.delay('reply', 800);
    await pollUntil('Redis taking a join of the member again', async () => (await rejoins(streamPrefix, slow.memberId)) > rejoinsBefore, {
      timeoutMs: 10_000,
    });

    proxy.clearFaults();
    await pollUntil('the member back with both shards', async () => slow.ownedShards().length === 2, { timeoutMs: 10_000 });
    await slow.stop();
  });
});

describe('a member alone on a link where each answer takes more than half of its call timeout', () => {
  it('joins, computes the target and reads: the commit is a call of its own, its heartbeat answered in time counts', async () => {
    const streamPrefix = uniqueName('slow-commit');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    await admin().createStream({ streamPrefix, shardCount: 2 });
    // 600 ms back for every answer, within the 1 s the member waits; a heartbeat and the commit it
    // asks for take 1.2 s. (Its first join also registers the group on the shard streams: a few
    // round trips, over the 1 s, paid once.)
    proxy.delay('reply', 600);
    const slow = aMember({ streamPrefix, sessionTimeoutMs: 3000, handler: recorder.handler('slow') }, redis.clientAt(proxy.url));
    let started = false;
    const starting = slow.start().then(() => {
      started = true;
    });
    await pollUntil('start() resolved', async () => started, { timeoutMs: 15_000 });
    await starting;
    const failed: string[] = [];
    slow.on('error', (error) => {
      if (error.message.includes('heartbeat failed')) failed.push(error.message);
    });
    await pollUntil('the member owning both shards', async () => slow.ownedShards().length === 2, { timeoutMs: 10_000 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(keyedMessages(4, 2, 'slow-link'));
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === 8, { timeoutMs: 10_000 });
    expect(await expiries(streamPrefix, slow.memberId)).toBe(0);
    expect(failed).toEqual([]);
    proxy.clearFaults();
    await slow.stop();
  });
});
