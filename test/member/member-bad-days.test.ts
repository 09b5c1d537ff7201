import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, CoordinatorClient, KeyBuilder, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// AOF with appendfsync always: what Redis acknowledged survives a restart.
const redis = useRedisServer({ persistence: 'aof' });
const aMember = memberFactory(redis, { retryBackoffMs: 1 }, () => redis.client({ maxRetriesPerRequest: 1 }));

/** Sends a batch, again and again while Redis is away (a batch may then be written twice: at-least-once). */
async function sendSurely(producer: StreamProducer, messages: { key: string; payload: KeyedPayload }[]) {
  for (;;) {
    try {
      return await producer.sendBatch(messages);
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

describe('bad days', () => {
  it('a hung handler is bounded by handlerTimeoutMs: retried, dead-lettered, and the shard moves on', async () => {
    const streamPrefix = uniqueName('hang');
    const handled: number[] = [];
    const timeouts: string[] = [];
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 2,
      handlerTimeoutMs: 100,
      handler: (message: StreamMessage<KeyedPayload>) => {
        if (message.payload.seq === 1) return new Promise<void>(() => undefined); // never settles
        handled.push(message.payload.seq);
        return undefined;
      },
    });
    member.on('error', (error) => /did not settle within handlerTimeoutMs/.test(error.message) && timeouts.push(error.message));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch([1, 2].map((seq) => ({ key: 'k', payload: { seq } })));
    await pollUntil('the entry after the hung one', async () => handled.includes(2));
    expect(timeouts).toHaveLength(2);
    const [letter] = await new CoordinatorAdmin(redis.client()).readDeadLetters(streamPrefix, 'group');
    expect(letter).toMatchObject({ shardIndex: 0, error: 'HandlerTimeoutError: handler did not settle within 100 ms', attempts: 2 });
  });

  it('without handlerTimeoutMs, a hung handler does not hold a revoked shard past revocationTimeoutMs: released with an error, the next owner runs the entry, the hung call cannot ack', async () => {
    const streamPrefix = uniqueName('hang-revoked');
    const runs: string[] = [];
    let release!: () => void;
    const hung = new Promise<void>((resolve) => (release = resolve));
    const first = aMember({
      streamPrefix,
      memberId: 'first',
      shardCount: 1,
      revocationTimeoutMs: 300,
      handler: () => {
        runs.push('first');
        return hung;
      },
    });
    const errors: string[] = [];
    first.on('error', (error) => errors.push(error.message));
    const refused: boolean[] = [];
    first.on('acknowledged', (event) => refused.push(!event.accepted));
    await first.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the first run started', async () => runs.length === 1);

    // Weighted far above the first member, the second takes the only shard: a revocation.
    const second = aMember({ streamPrefix, memberId: 'second', weight: 100, handler: () => void runs.push('second') });
    await second.start();
    await pollUntil('the next owner ran the entry', async () => runs.includes('second'));
    expect(errors).toContainEqual(expect.stringMatching(/shard 0: its handler still runs 300 ms after the shard was revoked/));

    release();
    await pollUntil('the hung call finished and its acknowledgement was refused', async () => refused.includes(true));
    expect(runs).toEqual(['first', 'second']);
  });

  it('Redis restarts (AOF) while members run and a producer writes: nothing is lost', async () => {
    const streamPrefix = uniqueName('restart');
    const recorder = new HandlerRecorder();
    const members = ['a', 'b'].map((id) =>
      aMember({
        streamPrefix,
        memberId: id,
        shardCount: 6,
        runtimeMaxConcurrency: 3,
        sessionTimeoutMs: 10_000,
        handler: recorder.handler(id),
      }),
    );
    await Promise.all(members.map((m) => m.start()));
    const producer = new StreamProducer(redis.client({ maxRetriesPerRequest: 1 }), { streamPrefix });
    const produced = new Set<string>();
    for (let round = 1; round <= 60; round++) {
      const batch = Array.from({ length: 20 }, (_, k) => ({ key: `key-${k}`, payload: { seq: round } }));
      await sendSurely(producer, batch);
      for (const m of batch) produced.add(`${m.key}/${m.payload.seq}`);
      if (round === 30) await redis.server.restart();
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    const handledKeys = () => new Set(recorder.runs.map((r) => `${r.key}/${r.seq}`));
    await pollUntil('every produced entry handled', async () => [...produced].every((k) => handledKeys().has(k)), { timeoutMs: 30_000 });
    expect(recorder.orderViolations()).toEqual([]);
    await pollUntil('nothing pending', async () => {
      const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
      return shards.every((s) => s.pending === 0 && s.lag === 0);
    });
  }, 60_000);

  it('describeGroup counts the lag itself where Redis cannot tell it (after an AOF restart XINFO says null)', async () => {
    const streamPrefix = uniqueName('lag');
    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix, shardCount: 1 });
    const stream = new KeyBuilder().shardStream(streamPrefix, 0);
    const client = redis.client();
    await client.xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
    for (let i = 0; i < 10; i++) await client.xadd(stream, '*', 'f', String(i));
    await client.xreadgroup('GROUP', 'group', 'c', 'COUNT', 3, 'STREAMS', stream, '>');
    // The coordinator group exists (a join), and nobody reads the shard.
    await new CoordinatorClient(client).heartbeat({ streamPrefix, consumerGroup: 'group', memberId: 'describer', memberEpoch: 0 });
    await redis.server.restart('SIGKILL');
    const after = redis.client();
    expect(JSON.stringify(await after.xinfo('GROUPS', stream))).toContain('"lag",null');
    const { shards } = await new CoordinatorAdmin(after).describeGroup(streamPrefix, 'group');
    expect(shards[0]).toMatchObject({ lag: 7, pending: 3 });
  });

  it('SCRIPT FLUSH under load: the scripts are reloaded (NOSCRIPT) and work goes on', async () => {
    const streamPrefix = uniqueName('flush');
    const recorder = new HandlerRecorder();
    const member = aMember({ streamPrefix, shardCount: 4, runtimeMaxConcurrency: 4, handler: recorder.handler('m') });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 500 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 1 } })));
    await redis.client().script('FLUSH');
    await producer.sendBatch(Array.from({ length: 500 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 51 } })));
    await pollUntil('1,000 entries handled', async () => recorder.distinctEntries() === 1000);
    await pollUntil('everything acknowledged', async () => {
      const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
      return shards.every((s) => s.pending === 0);
    });
    expect(recorder.orderViolations()).toEqual([]);
  });

  it('OOM (maxmemory reached): the member reports it, backs off, and loses nothing once memory is back', async () => {
    const streamPrefix = uniqueName('oom');
    const recorder = new HandlerRecorder();
    const member = aMember({
      streamPrefix,
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      sessionTimeoutMs: 10_000,
      handler: recorder.handler('m'),
    });
    const errors: string[] = [];
    member.on('error', (error) => errors.push(error.message));
    await member.start();
    const producer = new StreamProducer(redis.client({ maxRetriesPerRequest: 1 }), { streamPrefix });
    await producer.sendBatch(Array.from({ length: 200 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 1 } })));
    const admin = redis.client();
    try {
      await admin.config('SET', 'maxmemory', '1');
      await pollUntil('an OOM error reported by the member', async () => errors.some((e) => /OOM/.test(e)));
      await expect(producer.send({ key: 'k0', payload: { seq: 21 } })).rejects.toThrow(/OOM/);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    await sendSurely(
      producer,
      Array.from({ length: 200 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 21 } })),
    );
    await pollUntil('every entry handled', async () => new Set(recorder.runs.map((r) => `${r.key}/${r.seq}`)).size === 400);
    await pollUntil('nothing pending', async () => {
      const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
      return shards.every((s) => s.pending === 0 && s.lag === 0);
    });
    expect(recorder.orderViolations()).toEqual([]);
  });

  it('an acknowledgement that fails (NOPERM while an ACL denies scripts) is retried: the finished entry does not stay pending', async () => {
    const streamPrefix = uniqueName('ack-retry');
    const admin = redis.client();
    const user = uniqueName('acker');
    await admin.acl('SETUSER', user, 'on', '>secret', '~*', '&*', '+@all');
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started = 0;
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sessionTimeoutMs: 10_000,
        handler: async () => {
          started += 1;
          await gate;
        },
      },
      redis.client({ username: user, password: 'secret' }),
    );
    const errors: string[] = [];
    member.on('error', (error) => errors.push(error.message));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the handler running', async () => started === 1);
    try {
      await admin.acl('SETUSER', user, '-@scripting');
      release();
      await pollUntil('the acknowledgement failing', async () => errors.some((e) => /acknowledging 1 entries failed, retrying/.test(e)));
    } finally {
      await admin.acl('SETUSER', user, '+@all');
    }
    await pollUntil('the retried acknowledgement to land', async () => {
      const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
      return shards[0].pending === 0;
    });
    expect(started).toBe(1);
  });

  it('READONLY (a replica, then promoted in a failover): the member reports it, waits, then joins and handles everything', async () => {
    const streamPrefix = uniqueName('readonly');
    const primaryAdmin = new CoordinatorAdmin(redis.client());
    await primaryAdmin.createStream({ streamPrefix, shardCount: 4 });
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 100 }, (_, i) => ({ key: `k${i % 10}`, payload: { seq: Math.floor(i / 10) + 1 } })),
    );
    const replica = await RedisServer.start({ args: ['--replicaof', '127.0.0.1', String(redis.server.port)] });
    try {
      const replicaClient = redis.clientAt(replica.url);
      await pollUntil('the replica in sync', async () => {
        const info = await replicaClient.info('replication');
        return /master_link_status:up/.test(info) && (await replicaClient.exists(new KeyBuilder().shardStream(streamPrefix, 0))) === 1;
      });
      const recorder = new HandlerRecorder();
      const member = aMember(
        { streamPrefix, sessionTimeoutMs: 3000, handler: recorder.handler('m') },
        redis.clientAt(replica.url, { maxRetriesPerRequest: 1 }),
      );
      const errors: string[] = [];
      member.on('error', (error) => errors.push(error.message));
      const started = member.start();
      await pollUntil('a READONLY error reported by the member', async () => errors.some((e) => /READONLY/.test(e)));
      expect(member.stats().joined).toBe(false);
      await replicaClient.replicaof('NO', 'ONE');
      await started;
      await pollUntil('every entry handled on the promoted node', async () => recorder.distinctEntries() === 100);
      expect(recorder.orderViolations()).toEqual([]);
    } finally {
      await replica.stop();
    }
  });

  it('connection refused at start: start() waits (reporting errors) and joins once Redis is there', async () => {
    const streamPrefix = uniqueName('refused');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    await redis.server.kill();
    let restarted = false;
    try {
      const recorder = new HandlerRecorder();
      const member = aMember({ streamPrefix, handler: recorder.handler('m') });
      const errors: string[] = [];
      member.on('error', (error) => errors.push(error.message));
      const started = member.start();
      await pollUntil('a connection error reported by the member', async () =>
        errors.some((e) => /ECONNREFUSED|Connection is closed|no answer|max retries/i.test(e)),
      );
      await redis.server.restart();
      restarted = true;
      await started;
      await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
      await pollUntil('the entry handled', async () => recorder.distinctEntries() === 1);
    } finally {
      if (!restarted) await redis.server.restart();
    }
  });
});
