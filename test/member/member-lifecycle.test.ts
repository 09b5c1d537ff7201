import { describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  CoordinatorClient,
  ErrorCode,
  FencedInstanceIdError,
  GroupNotFoundError,
  KeyBuilder,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { ProtocolMember } from '@redis-stream-coordinator/core/testing';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis);
const aProxy = proxyFactory(redis);

async function events(streamPrefix: string, type: string): Promise<string[][]> {
  const entries = await redis.client().xrange(new KeyBuilder().groupEvents(streamPrefix, 'group'), '-', '+');
  return entries.map(([, fields]) => fields).filter((fields) => fields[1] === type);
}

async function memberState(streamPrefix: string, memberId: string) {
  const description = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
  return description.members.find((m) => m.memberId === memberId);
}

/** A promise to await and a function that resolves it: a handler waits on it until the test says so. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe('stop() while a handler outlives the session timeout (SPEC 9.1: it keeps heartbeating until it left)', () => {
  it('the stopping member keeps heartbeating until it left: it is never expired, and no two handlers of its shard run at once', async () => {
    const streamPrefix = uniqueName('drain');
    const recorder = new HandlerRecorder();
    const started = gate();
    const slow = async (message: { payload: KeyedPayload }) => {
      if (message.payload.seq === 1) {
        started.open();
        // Longer than two session timeouts: without heartbeats the member would expire meanwhile.
        await new Promise((resolve) => setTimeout(resolve, 2500));
      }
    };
    const stopping = aMember({
      streamPrefix,
      memberId: 'stopping',
      shardCount: 1,
      sessionTimeoutMs: 1000,
      handler: recorder.handler('stopping', slow),
    });
    await stopping.start();
    const other = aMember({ streamPrefix, memberId: 'other', sessionTimeoutMs: 1000, handler: recorder.handler('other') });
    await other.start();
    expect(stopping.ownedShards()).toEqual([0]);

    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch([1, 2, 3].map((seq) => ({ key: 'k', payload: { seq } })));
    await started.opened;
    await stopping.stop();

    await pollUntil('every entry handled', async () => recorder.distinctEntries() === 3);
    expect(recorder.overlaps()).toEqual([]);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
    expect((await memberState(streamPrefix, 'stopping'))!.state).toBe('LEFT');
    expect(await events(streamPrefix, 'MEMBER_EXPIRED')).toEqual([]);
  });
});

describe('recovery from refusals that are not fencing (docs/runtime.md, Error paths: INVALID_REQUEST, GROUP_NOT_FOUND)', () => {
  it('a member whose report no longer fits the stream (INVALID_REQUEST twice) drops everything and rejoins', async () => {
    const streamPrefix = uniqueName('invalid');
    const handlers = gate();
    const a = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      rebalanceTimeoutMs: 60_000,
      handler: () => handlers.opened,
    });
    const fenced: string[] = [];
    a.on('fenced', (event) => fenced.push(event.errorCode));
    await a.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 40 }, (_, i) => ({ key: `k${i}`, payload: { seq: 1 } })));
    await pollUntil('a handler on every shard', async () => a.stats().activeHandlers === 4);

    // b joins: a must revoke two shards, and waits for their handlers.
    const b = new ProtocolMember(new CoordinatorClient(redis.client()), streamPrefix, 'group', 'b');
    await b.join();
    await pollUntil('a revoking two shards', async () => a.stats().revokingShards.length === 2);
    // The stream's span shrinks under it (as a shrink plus deleteDrainedShards would): the
    // acknowledgement of shards 2 and 3 no longer fits, and would be refused until the rebalance timeout.
    const meta = new KeyBuilder().streamMeta(streamPrefix);
    await redis.client().hset(meta, 'shardCount', 2, 'shardSpan', 2);
    handlers.open();

    await pollUntil('a to drop everything after INVALID_REQUEST', async () => fenced.includes(ErrorCode.INVALID_REQUEST), {
      timeoutMs: 10_000,
    });
    await pollUntil('a to rejoin', async () => a.currentMemberEpoch() > 0 && a.stats().problems.length === 0);
  });

  it('after Redis lost every key, a member given shardCount recreates the stream, rejoins and reads again', async () => {
    const streamPrefix = uniqueName('flushed');
    const recorder = new HandlerRecorder();
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 2, sessionTimeoutMs: 1500, handler: recorder.handler('a') });
    await a.start();
    await redis.client().flushall();

    await pollUntil('a to own both shards of the recreated stream', async () => {
      const description = await new CoordinatorAdmin(redis.client()).describeStream(streamPrefix);
      return description?.shardCount === 2 && a.ownedShards().length === 2 && a.currentMemberEpoch() > 0;
    });
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the entry handled', async () => recorder.distinctEntries() === 1);
    expect(a.stats().problems).toEqual([]);
  });

  it('without shardCount it backs off, reports one GroupNotFoundError and a problem, and rejoins once the stream exists again', async () => {
    const streamPrefix = uniqueName('lost');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 2 });
    const a = aMember({ streamPrefix, memberId: 'a', sessionTimeoutMs: 1500, handler: () => undefined });
    const missing: Error[] = [];
    a.on('error', (error) => {
      if (error instanceof GroupNotFoundError) missing.push(error);
    });
    // When each answer saying the stream is missing came (to know the member retried, and how
    // often), and how many answers came at all.
    const missingAt: number[] = [];
    let answers = 0;
    // The member's heartbeat is one heartbeatOnce (a target it is asked to compute is committed after it).
    const heartbeat = a.coordinator.heartbeatOnce.bind(a.coordinator);
    a.coordinator.heartbeatOnce = async (request) => {
      const response = await heartbeat(request);
      answers += 1;
      if (response.errorCode === ErrorCode.GROUP_NOT_FOUND) missingAt.push(performance.now());
      return response;
    };
    await a.start();
    // Settled first: the heartbeat that reports the new ownership (asked for at once, outside the
    // schedule) has been answered, so only the backoff paces what follows.
    await pollUntil('a to own both shards', async () => a.ownedShards().length === 2);
    const settledAt = answers;
    await pollUntil('two more heartbeats answered', async () => answers >= settledAt + 2);
    await redis.client().flushall();
    const missingAnswers = () => missingAt.length;

    const problems = await pollUntil('the problem to show', async () => a.stats().problems.length > 0 && a.stats().problems);
    expect(problems[0]).toMatch(/has no metadata/);
    expect(a.stats()).toMatchObject({ joined: false, ownedShards: [] });
    // Retries with backoff (0.25 s, 0.5 s, 1 s, ...), and none of the retries reports again.
    await pollUntil('three refused retries', async () => missingAnswers() >= 3);
    // Not hot: at a hot loop the three answers would come milliseconds apart. With backoff the third
    // comes 0.25 + 0.5 s after the first, less the schedule's jitter (each delay 85-100 % of the
    // backoff, HeartbeatSchedule.after): 637 ms at the least (timers never fire early).
    expect(missingAt[2] - missingAt[0]).toBeGreaterThanOrEqual(Math.floor(0.85 * 750));
    await admin.createStream({ streamPrefix, shardCount: 2 });
    await pollUntil('a to rejoin', async () => a.stats().joined && a.ownedShards().length === 2, { timeoutMs: 15_000 });
    expect(a.stats().problems).toEqual([]);
    expect(missing).toHaveLength(1);
  });
});

describe('group keys lost while fencing tokens survive (SPEC 9.3)', () => {
  it('the recreated group claims its shards over the tokens of its former life and reads them', async () => {
    const streamPrefix = uniqueName('reborn');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 1 });
    // Raise the group epoch well above where a recreated group starts, then grant the shard there.
    const coordinator = new CoordinatorClient(redis.client());
    for (let i = 0; i < 6; i++) {
      const visitor = new ProtocolMember(coordinator, streamPrefix, 'group', `visitor-${i}`);
      await visitor.join();
      await visitor.leave();
    }
    const recorder = new HandlerRecorder();
    const old = aMember({ streamPrefix, memberId: 'old', handler: recorder.handler('old') });
    await old.start();
    await pollUntil('old to read shard 0', async () => old.ownedShards().length === 1 && old.currentMemberEpoch() > 6);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the first entry handled', async () => recorder.distinctEntries() === 1);
    await old.stop();

    const [, , ...groupKeys] = new KeyBuilder().groupKeys(streamPrefix, 'group');
    await redis.client().del(...groupKeys);
    const fresh = aMember({ streamPrefix, memberId: 'fresh', handler: recorder.handler('fresh') });
    await fresh.start();
    await producer.send({ key: 'k', payload: { seq: 2 } });
    await pollUntil('the entry after the loss handled', async () => recorder.distinctEntries() === 2);
    expect(fresh.stats().problems).toEqual([]);
    const shard = (await admin.describeGroup(streamPrefix, 'group')).shards[0];
    expect(shard).toMatchObject({ owner: 'fresh', lag: 0 });
  });
});

describe('two processes with one memberId (SPEC 9.4)', () => {
  it('exactly one owns shards; the other stops for good with FencedInstanceIdError; no entry runs twice at once', async () => {
    const streamPrefix = uniqueName('twins');
    const recorder = new HandlerRecorder();
    const work = () => new Promise<void>((resolve) => setTimeout(resolve, 2));
    const first = aMember({
      streamPrefix,
      memberId: 'same',
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      handler: recorder.handler('first', work),
    });
    const second = aMember({
      streamPrefix,
      memberId: 'same',
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      handler: recorder.handler('second', work),
    });
    const secondErrors: Error[] = [];
    second.on('error', (error) => secondErrors.push(error));
    await first.start();

    const producer = new StreamProducer(redis.client(), { streamPrefix });
    let produced = 0;
    const producing = (async () => {
      for (let round = 1; round <= 40; round++) {
        await producer.sendBatch(Array.from({ length: 10 }, (_, k) => ({ key: `key-${k}`, payload: { seq: round } })));
        produced += 10;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const refused = await second.start().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toBeInstanceOf(FencedInstanceIdError);
    expect(String((refused as Error).message)).toMatch(/in use by another live instance/);
    await producing;
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === produced, { timeoutMs: 20_000 });

    expect(new Set(recorder.runs.map((r) => r.memberId))).toEqual(new Set(['first']));
    expect(recorder.overlaps()).toEqual([]);
    expect(recorder.duplicates()).toEqual([]);
    expect(first.ownedShards()).toEqual([0, 1, 2, 3]);
    expect(second.ownedShards()).toEqual([]);
    expect(secondErrors.filter((e) => e instanceof FencedInstanceIdError)).toHaveLength(1);
    expect(second.stats().problems.join('\n')).toMatch(/in use by another live instance/);
    await expect(second.start()).rejects.toBe(refused);
    expect(first.stats().joined).toBe(true);
  });

  it('an instance whose id was taken over after its lease ran out is fenced, refused on rejoin, and stops', async () => {
    const streamPrefix = uniqueName('taken');
    const proxy = await aProxy();
    const paused = new CoordinatedMember(redis.clientAt(proxy.url, { maxRetriesPerRequest: null }), {
      streamPrefix,
      consumerGroup: 'group',
      memberId: 'same',
      shardCount: 2,
      sessionTimeoutMs: 600,
      coordinator: { heartbeatIntervalMs: 100 },
      handler: () => undefined,
    });
    const errors: Error[] = [];
    paused.on('error', (error) => errors.push(error));
    await paused.start();
    proxy.freeze(); // the process is paused past its session timeout
    // Meanwhile another instance with the same id joins, once the paused one's lease ran out.
    const usurper = new ProtocolMember(new CoordinatorClient(redis.client()), streamPrefix, 'group', 'same', {
      instanceId: 'usurper',
      sessionTimeoutMs: 60_000,
    });
    await pollUntil('the usurper to get the id', async () => (await usurper.join()).errorCode === ErrorCode.NONE, { timeoutMs: 5000 });
    proxy.thaw();

    await pollUntil('the paused instance to stop for good', async () => errors.some((e) => e instanceof FencedInstanceIdError));
    expect(paused.ownedShards()).toEqual([]);
    expect(paused.stats()).toMatchObject({ joined: false, ownedShards: [] });
    await paused.stop();
    // It did not leave on the usurper's behalf.
    expect((await memberState(streamPrefix, 'same'))!.state).toBe('ACTIVE');
    expect((await usurper.heartbeat()).errorCode).toBe(ErrorCode.NONE);
  });
});

describe('the cutover read after a metadata change (SPEC 10.1: bounded; docs/runtime.md, Error paths)', () => {
  it('a read that never answers neither stalls the heartbeats nor lets the member take shards without their holds', async () => {
    const streamPrefix = uniqueName('cutover-read');
    const connection = redis.client();
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 4, sessionTimeoutMs: 900, handler: () => undefined }, connection);
    const b = aMember({ streamPrefix, memberId: 'b', sessionTimeoutMs: 900, handler: () => undefined });
    await a.start();
    await b.start();
    await pollUntil('two shards each', async () => a.ownedShards().length === 2 && b.ownedShards().length === 2);
    const cutoverErrors: Error[] = [];
    a.on('error', (error) => {
      if (/cutover/.test(error.message)) cutoverErrors.push(error);
    });

    // The group's cutover is the only thing the member reads with HMGET: that read now never answers.
    const hmget = connection.hmget.bind(connection);
    connection.hmget = (() => new Promise(() => undefined)) as unknown as typeof connection.hmget;
    await redis.client().hincrby(new KeyBuilder().streamMeta(streamPrefix), 'metadataVersion', 1);
    await pollUntil('the failed read to show', async () => a.stats().problems.some((p) => /cutover/.test(p)));
    await b.stop(); // a is granted b's shards now, but has no holds for them yet

    // Heartbeats go on across several session timeouts; the granted shards wait for the metadata.
    const expiredBefore = await events(streamPrefix, 'MEMBER_EXPIRED');
    await pollUntil('several failed reads', async () => cutoverErrors.length >= 4, { timeoutMs: 15_000 });
    expect(a.ownedShards()).toHaveLength(2);
    expect(await events(streamPrefix, 'MEMBER_EXPIRED')).toEqual(expiredBefore);
    expect((await memberState(streamPrefix, 'a'))!.state).toBe('ACTIVE');

    connection.hmget = hmget;
    await pollUntil(
      'a to take the shards once the metadata is synced',
      async () => a.ownedShards().length === 4 && a.stats().problems.length === 0,
    );
  });
});
