import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer, type StreamMessage } from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 9.1 for the poller: every error path ends in a retry, a handoff, or one visible error
// (docs/runtime.md, Error paths).
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const keys = new KeyBuilder();
const aProxy = proxyFactory(redis);

function admin() {
  return new CoordinatorAdmin(redis.client());
}

async function settledShard(streamPrefix: string, shardIndex: number) {
  return pollUntil(`shard ${shardIndex} fully acknowledged`, async () => {
    const shard = (await admin().describeGroup(streamPrefix, 'group')).shards[shardIndex];
    return shard.pending === 0 && shard.lag === 0 && shard;
  });
}

function send(streamPrefix: string, seqs: number[]) {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(seqs.map((seq) => ({ key: 'k', payload: { seq } })));
}

describe('a retry due while the lease looks unsafe', () => {
  it('waits, keeping the shard, until the lease is safe again; the next entry of the shard waits for it', async () => {
    const streamPrefix = uniqueName('unsafe-retry');
    const proxy = await aProxy();
    const seen: number[] = [];
    let failed = false;
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sessionTimeoutMs: 3000,
        // Heartbeats answered 900 ms late, sent every ~1.5 s: the lease looks unsafe for a while before
        // each answer arrives (nothing is wrong with the member; it just cannot prove it yet).
        coordinator: { heartbeatIntervalMs: 1500 },
        retryBackoffMs: 20,
        handler: async (message: StreamMessage<KeyedPayload>) => {
          seen.push(message.payload.seq);
          if (message.payload.seq === 1 && !failed) {
            failed = true;
            await pollUntil('the lease to look unsafe', async () => !member.stats().joined, { timeoutMs: 10_000, intervalMs: 5 });
            throw new Error('fails once, as the lease turns unsafe');
          }
        },
      },
      redis.clientAt(proxy.url),
    );
    await member.start();
    proxy.delay('reply', 900);
    await send(streamPrefix, [1, 2]);
    await pollUntil('entry 2 handled', async () => seen.includes(2), { timeoutMs: 15_000 });
    proxy.clearFaults();
    expect(seen).toEqual([1, 1, 2]);
    await settledShard(streamPrefix, 0);
    await member.stop(); // while the proxy is still there (it is stopped before the factory's cleanup)
  });
});

describe('dead letters', () => {
  it('a dead-letter write that fails (WRONGTYPE) is retried while the shard is owned, visibly; later entries wait', async () => {
    const streamPrefix = uniqueName('dlq-fails');
    const deadLetterKey = keys.shardDeadLetterStream(streamPrefix, 0, 'group');
    await redis.client().set(deadLetterKey, 'not a stream');
    const handled: number[] = [];
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 1,
      handler: (message: StreamMessage<KeyedPayload>) => {
        if (message.payload.seq === 1) throw new Error('poison');
        handled.push(message.payload.seq);
      },
    });
    const failures: string[] = [];
    member.on('error', (error) => /writing the dead letter/.test(error.message) && failures.push(error.message));
    await member.start();
    const [poison] = await send(streamPrefix, [1, 2]);
    await pollUntil('two failed writes', async () => failures.length >= 2);
    expect(failures[0]).toMatch(/WRONGTYPE/);
    expect(member.stats().problems).toEqual([expect.stringMatching(new RegExp(`shard 0: writing the dead letter of ${poison.id} failed`))]);
    expect(handled).toEqual([]);

    await redis.client().del(deadLetterKey);
    await pollUntil('entry 2 handled', async () => handled.includes(2));
    expect(member.stats().problems).toEqual([]);
    const letters = await admin().readDeadLetters(streamPrefix, 'group');
    expect(letters).toMatchObject([{ shardIndex: 0, entryId: poison.id, error: 'Error: poison', attempts: 1, memberId: member.memberId }]);
    await settledShard(streamPrefix, 0);
  });

  it('a member whose shard moved (its fencing token replaced) writes no dead letter and acks nothing', async () => {
    const streamPrefix = uniqueName('dlq-fenced');
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started = false;
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 1,
      handler: async () => {
        started = true;
        await gate;
        throw new Error('fails after its shard moved');
      },
    });
    const refused: string[] = [];
    member.on(
      'error',
      (error) => /dead letter of .* refused, the shard has a new owner/.test(error.message) && refused.push(error.message),
    );
    await member.start();
    const [entry] = await send(streamPrefix, [1]);
    await pollUntil('the handler to run', async () => started);
    // Another owner installs its token (the coordinator moved the shard; this member has not heard
    // yet): a newer one, as a real owner's is. (A refused call makes the member heartbeat and, the
    // coordinator here still granting the shard, claim it again: a token that is not newer would lose.)
    const fence = keys.shardFence(streamPrefix, 0, 'group');
    const [incarnation, epoch] = (await redis.client().get(fence))!.split(':');
    await redis.client().set(fence, `${incarnation}:${Number(epoch) + 5}:another-owner`);
    release();
    await pollUntil('the dead letter to be refused', async () => refused.length === 1);
    expect(await redis.client().exists(keys.shardDeadLetterStream(streamPrefix, 0, 'group'))).toBe(0);
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toEqual([]);
    const pending = (await redis.client().xpending(keys.shardStream(streamPrefix, 0), 'group', '-', '+', 10)) as unknown[][];
    expect(pending.map(([id, consumer]) => [id, consumer])).toEqual([[entry.id, member.memberId]]); // not acknowledged
  });

  it("readDeadLetters lists every shard's dead letters, oldest first, with the entry and why", async () => {
    const streamPrefix = uniqueName('dlq-read');
    const member = aMember({
      streamPrefix,
      shardCount: 3,
      maxAttempts: 1,
      handler: (message: StreamMessage<KeyedPayload>) => {
        throw new RangeError(`no ${message.payload.seq}`);
      },
    });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const written = [];
    for (const shardIndex of [2, 0, 1]) {
      written.push(...(await producer.sendBatch([{ shardIndex, payload: { seq: shardIndex } }])));
      await pollUntil(
        `shard ${shardIndex}'s dead letter`,
        async () => (await admin().readDeadLetters(streamPrefix, 'group')).length === written.length,
      );
    }
    const letters = await admin().readDeadLetters(streamPrefix, 'group');
    expect(letters.map((l) => [l.shardIndex, l.entryId, l.error, l.attempts])).toEqual([
      [2, written[0].id, 'RangeError: no 2', 1],
      [0, written[1].id, 'RangeError: no 0', 1],
      [1, written[2].id, 'RangeError: no 1', 1],
    ]);
    expect(letters[0].fields).toEqual(['p', '{"seq":2}', 'c', 'json']);
    expect(letters[0].deadLetterId).toMatch(/^\d+-\d+$/);
    expect(await admin().readDeadLetters(streamPrefix, 'group', { count: 1 })).toHaveLength(1);
    await expect(admin().readDeadLetters(streamPrefix, 'group', { count: 0 })).rejects.toThrow(/count must be an integer from 1/);
  });
});

describe('reads whose reply is lost', () => {
  it('an entry delivered in a lost XREADGROUP reply is recovered within sweepIntervalMs on a quiet shard', async () => {
    const streamPrefix = uniqueName('lost-read');
    const proxy = await aProxy();
    const recorder = new HandlerRecorder();
    const member = aMember(
      { streamPrefix, shardCount: 1, sweepIntervalMs: 1000, blockMs: 10_000, handler: recorder.handler('m') },
      redis.clientAt(proxy.url),
    );
    const errors: string[] = [];
    member.on('error', (error) => errors.push(error.message));
    await member.start();
    await send(streamPrefix, [1]);
    await pollUntil('entry 1 handled', async () => recorder.runs.length === 1);

    let armed: () => void = () => undefined;
    const readWaiting = new Promise<void>((resolve) => (armed = resolve));
    const dropped = proxy.dropNextReply(TcpProxy.command('XREADGROUP'), armed);
    await readWaiting; // the next read is blocked in Redis; its reply will not come back
    const [lost] = await send(streamPrefix, [2]);
    await dropped;
    await pollUntil('the lost entry handled', async () => recorder.runs.some((r) => r.id === lost.id), { timeoutMs: 5000 });
    expect(recorder.runs.map((r) => r.seq)).toEqual([1, 2]);
    expect(errors.some((e) => e.includes(`were not being handled`) && e.includes(lost.id))).toBe(true);
    await settledShard(streamPrefix, 0);
  });
});

describe('a refused shard claim', () => {
  it('keeps the shard known, says who holds it, retries with backoff, and reads once the claim succeeds', async () => {
    const streamPrefix = uniqueName('refused');
    const fence = keys.shardFence(streamPrefix, 0, 'group');
    // A token newer than any grant this group can make (as if a later incarnation's owner held it):
    // tokens of a former life are older by construction, so only a stale grant meets this.
    await redis.client().set(fence, '9999999999999999:1:ghost');
    const handled: number[] = [];
    const member = aMember({ streamPrefix, shardCount: 1, handler: (m: StreamMessage<KeyedPayload>) => void handled.push(m.payload.seq) });
    const refusals: string[] = [];
    member.on('error', (error) => /newer fencing token/.test(error.message) && refusals.push(error.message));
    await member.start();
    await send(streamPrefix, [1]);
    await pollUntil('two refusals', async () => refusals.length >= 2);
    expect(refusals[0]).toMatch(/9999999999999999:1:ghost/);
    expect(member.stats().ownedShards).toEqual([0]);
    expect(member.stats().problems).toEqual([
      expect.stringMatching(/shard 0: granted at epoch \d+ but a newer fencing token "9999999999999999:1:ghost" holds it/),
    ]);
    expect(handled).toEqual([]);

    await redis.client().del(fence);
    await pollUntil('entry 1 handled', async () => handled.includes(1));
    expect(member.stats().problems).toEqual([]);
    await settledShard(streamPrefix, 0);
  });
});

describe('takeovers', () => {
  it('entries deleted from the stream while pending are reported, not dropped silently', async () => {
    const streamPrefix = uniqueName('deleted');
    const stream = keys.shardStream(streamPrefix, 0);
    const client = redis.client();
    await admin().createStream({ streamPrefix, shardCount: 1 });
    await client.xgroup('CREATE', stream, 'group', '0', 'MKSTREAM');
    const ids = [];
    for (const seq of [1, 2, 3]) ids.push(await client.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', 'k'));
    await client.xreadgroup('GROUP', 'group', 'gone', 'COUNT', 10, 'STREAMS', stream, '>');
    await client.xdel(stream, ids[1]!);
    const handled: number[] = [];
    const member = aMember({ streamPrefix, handler: (m: StreamMessage<KeyedPayload>) => void handled.push(m.payload.seq) });
    const errors: string[] = [];
    member.on('error', (error) => errors.push(error.message));
    await member.start();
    await pollUntil('the others handled', async () => handled.length === 2);
    expect(handled).toEqual([1, 3]);
    expect(errors).toContainEqual(
      expect.stringMatching(new RegExp(`entries ${ids[1]} were deleted from the stream .* before they were handled`)),
    );
  });

  it('entries a zombie read between the claim and the takeover run once, in order', async () => {
    const streamPrefix = uniqueName('claim-window');
    const stream = keys.shardStream(streamPrefix, 0);
    const proxy = await aProxy();
    let openGate: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (openGate = resolve));
    const recorder = new HandlerRecorder();
    const member = aMember(
      {
        streamPrefix,
        memberId: 'owner',
        shardCount: 1,
        handler: recorder.handler('owner', async (m) => {
          if (m.payload.seq === 1) await gate;
        }),
      },
      redis.clientAt(proxy.url),
    );
    // The member's first takeover call (after its claim ran) waits at the proxy while a zombie reads.
    const takeover = proxy.holdNextRequest(
      (request) => request.includes(keys.shardFence(streamPrefix, 0, 'group')) && request.includes('$3\r\nall\r\n'),
    );
    const starting = member.start();
    await takeover.arrived;
    const late = redis.client().multi();
    for (const seq of [1, 2, 3]) late.xadd(stream, '*', 'p', JSON.stringify({ seq }), 'k', 'k');
    late.xreadgroup('GROUP', 'group', 'zombie', 'COUNT', 10, 'STREAMS', stream, '>');
    await late.exec();
    takeover.release();
    await starting;
    await pollUntil('the takeover', async () => member.stats().activeHandlers === 1);
    await send(streamPrefix, [4]);
    await pollUntil('entry 4 read', async () => member.stats().bufferedEntries >= 3);
    openGate();
    await pollUntil('all four handled', async () => recorder.distinctEntries() === 4);
    await settledShard(streamPrefix, 0);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.runs.map((r) => r.seq)).toEqual([1, 2, 3, 4]);
  });
});

describe('releasing a shard', () => {
  it('waits for an earlier ack batch of the shard that is still retrying before it reports the revocation', async () => {
    const streamPrefix = uniqueName('revoke-acks');
    const recorder = new HandlerRecorder();
    const first = aMember({ streamPrefix, memberId: 'first', shardCount: 2, handler: recorder.handler('first') });
    await first.start();
    await pollUntil(
      'both shards claimed',
      async () => (await redis.client().exists(...[0, 1].map((s) => keys.shardFence(streamPrefix, s, 'group')))) === 2,
    );
    // Acks of both shards fail (their fencing keys cannot be read) and are retried with backoff.
    const fences = [0, 1].map((s) => keys.shardFence(streamPrefix, s, 'group'));
    const tokens = await Promise.all(fences.map((fence) => redis.client().get(fence)));
    for (const fence of fences) await redis.client().multi().del(fence).rpush(fence, 'unreadable').exec();
    const failedAcks: string[] = [];
    first.on('error', (error) => /acknowledging 1 entries failed, retrying/.test(error.message) && failedAcks.push(error.message));
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      [0, 1].map((shardIndex) => ({ shardIndex, payload: { seq: shardIndex } })),
    );
    await pollUntil('both acks failing', async () => failedAcks.length >= 2);

    const timeline: string[] = [];
    first.on('acknowledged', (event) => event.accepted && timeline.push(`acked ${event.shardIndex}`));
    first.on('revoked', (event) => timeline.push(`revoked ${event.shards.join(',')}`));
    const second = aMember({ streamPrefix, memberId: 'second', handler: recorder.handler('second') });
    await second.start();
    await pollUntil('a revocation under way (or over)', async () => first.stats().revokingShards.length > 0 || timeline.length > 0, {
      intervalMs: 5,
    });
    // Redis is fine again: the first member's token comes back (unless a new owner's token is there already).
    const restore = "if redis.call('TYPE', KEYS[1]).ok == 'list' then redis.call('SET', KEYS[1], ARGV[1]) end";
    for (const [i, fence] of fences.entries()) await redis.client().eval(restore, 1, fence, tokens[i]!);
    await pollUntil('one shard each', async () => second.ownedShards().length === 1 && first.ownedShards().length === 1, {
      timeoutMs: 15_000,
    });
    await settledShard(streamPrefix, 0);
    await settledShard(streamPrefix, 1);
    const revoked = timeline.find((t) => t.startsWith('revoked'))!;
    expect(timeline.indexOf(`acked ${revoked.slice('revoked '.length)}`)).toBeGreaterThanOrEqual(0);
    expect(timeline.indexOf(`acked ${revoked.slice('revoked '.length)}`)).toBeLessThan(timeline.indexOf(revoked));
    expect(recorder.duplicates()).toEqual([]);
  });
});
