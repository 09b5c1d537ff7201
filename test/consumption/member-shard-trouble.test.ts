import { afterEach, describe, expect, it, onTestFinished } from 'vitest';
import {
  type BatchMemberOptions,
  CoordinatedMember,
  CoordinatorAdmin,
  KeyBuilder,
  StreamProducer,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 10.8: one shard's trouble stays in that shard. One member, one worker
// (runtimeMaxConcurrency 1), two shards: whatever shard 0 waits for, shard 1 goes on; shard 0's
// own later entries wait (SPEC 5 order).
const redis = useRedisServer();
const aMember = memberFactory(redis, { shardCount: 2, runtimeMaxConcurrency: 1 });
const aProxy = proxyFactory(redis);

function send(streamPrefix: string, shardIndex: number, seqs: number[]) {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(seqs.map((seq) => ({ shardIndex, payload: { seq } })));
}

async function settledShards(streamPrefix: string) {
  return pollUntil('every shard fully acknowledged', async () => {
    const { shards } = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
    return shards.every((s) => s.pending === 0 && s.lag === 0) && shards;
  });
}

/** `shard:seq:deliveryCount` of each handler call as it starts. */
function label(message: StreamMessage<KeyedPayload>): string {
  return `${message.shardIndex}:${message.payload.seq}:${message.deliveryCount}`;
}

/** A batch member (the factory's options are for single-entry handlers), stopped after its test. */
const batchMembers: CoordinatedMember<KeyedPayload>[] = [];
afterEach(async () => {
  await Promise.all(batchMembers.splice(0).map((m) => m.stop().catch(() => undefined)));
});
function aBatchMember(options: BatchMemberOptions<KeyedPayload>) {
  const member = new CoordinatedMember<KeyedPayload>(redis.client(), options);
  member.on('error', () => undefined);
  batchMembers.push(member);
  return member;
}

/** A promise and the function that settles it. */
function aGate() {
  let open: () => void = () => undefined;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe('one worker, two shards: a retry backoff', () => {
  it("a retry backoff on shard 0 frees the only worker: shard 1's entries run meanwhile, shard 0's next entry waits for the retry", async () => {
    const streamPrefix = uniqueName('backoff');
    const runs: string[] = [];
    const member = aMember({
      streamPrefix,
      maxAttempts: 2,
      // Long enough for shard 1's entries to be read and run under load, short enough for the test.
      retryBackoffMs: 3000,
      handler: (message: StreamMessage<KeyedPayload>) => {
        runs.push(label(message));
        if (message.shardIndex === 0 && message.payload.seq === 1 && message.deliveryCount === 1) throw new Error('fails once');
      },
    });
    await member.start();
    await send(streamPrefix, 0, [1, 2]);
    await pollUntil("shard 0's first attempt", async () => runs.includes('0:1:1'));
    await send(streamPrefix, 1, [1, 2, 3]);
    await pollUntil('every entry handled', async () => runs.includes('0:2:1'), { timeoutMs: 10_000 });
    expect(runs).toEqual(['0:1:1', '1:1:1', '1:2:1', '1:3:1', '0:1:2', '0:2:1']);
    await settledShards(streamPrefix);
  });

  it("a batch's retry backoff on shard 0 frees the only worker for shard 1", async () => {
    const streamPrefix = uniqueName('batch-backoff');
    const runs: string[] = [];
    let failed = false;
    const member = aBatchMember({
      streamPrefix,
      consumerGroup: 'group',
      shardCount: 2,
      runtimeMaxConcurrency: 1,
      coordinator: { heartbeatIntervalMs: 200 },
      maxAttempts: 2,
      // Long enough for shard 1's entries to be read and run under load, short enough for the test.
      retryBackoffMs: 3000,
      batch: { maxSize: 10 },
      handler: (messages: StreamMessage<KeyedPayload>[]) => {
        runs.push(messages.map(label).join(','));
        if (messages[0].shardIndex === 0 && !failed) {
          failed = true;
          throw new Error('the batch fails once');
        }
      },
    });
    await member.start();
    await send(streamPrefix, 0, [1, 2]);
    await pollUntil("shard 0's first call", async () => runs.length === 1);
    await send(streamPrefix, 1, [1, 2]);
    await pollUntil("shard 0's retry", async () => runs.some((r) => r.startsWith('0:1:2')), { timeoutMs: 10_000 });
    expect(runs).toEqual(['0:1:1,0:2:1', '1:1:1,1:2:1', '0:1:2,0:2:2']);
    await settledShards(streamPrefix);
  });
});

describe('one worker, two shards: a hanging handler', () => {
  it('a handler hanging on shard 0 past handlerStallMs gives the worker back: shard 1 goes on; one error and a problems line name the entry and shard until the call ends', async () => {
    const streamPrefix = uniqueName('hang');
    const runs: string[] = [];
    const hang = aGate();
    const member = aMember({
      streamPrefix,
      handlerStallMs: 1000,
      handler: async (message: StreamMessage<KeyedPayload>) => {
        runs.push(label(message));
        if (message.shardIndex === 0 && message.payload.seq === 1) await hang.opened;
      },
    });
    const errors: string[] = [];
    member.on('error', (error) => errors.push(error.message));
    await member.start();
    // Opened at the end of the test in any case: a member left with a hung call would wait out its shutdown timeout.
    onTestFinished(() => hang.open());
    const [hung] = await send(streamPrefix, 0, [1, 2]);
    await pollUntil("shard 0's handler to start", async () => runs.includes('0:1:1'));
    await send(streamPrefix, 1, [1, 2]);
    await pollUntil("shard 1's entries handled beside the hung call", async () => runs.includes('1:2:1'), { timeoutMs: 5000 });
    const stall = new RegExp(`^shard 0: the handler of ${hung.id} has run for more than handlerStallMs \\(1000 ms\\)`);
    expect(member.stats().problems).toEqual([expect.stringMatching(stall)]);
    expect(errors.filter((e) => stall.test(e))).toHaveLength(1);
    expect(member.stats().activeHandlers).toBe(1);
    // Without lanes, the shard's later entry waits for the hung call (SPEC 5 order).
    expect(runs).not.toContain('0:2:1');

    hang.open();
    await pollUntil("shard 0's next entry handled", async () => runs.includes('0:2:1'));
    expect(member.stats().problems).toEqual([]);
    expect(errors.filter((e) => stall.test(e))).toHaveLength(1);
    await settledShards(streamPrefix);
  });

  it("entries queued behind a call hanging on shard 0 fill more than half the buffer: shard 1's new entries are read all the same, not left waiting for room for a fuller read", async () => {
    // maxBufferedEntries 10: shard 0's 8 entries are read, the first hangs and 7 wait behind it. A
    // read waits for room for half the buffer (5), which shard 0 will not make while its call
    // hangs; it waits 50 ms at most after the last read, so shard 1 is read all the same.
    const streamPrefix = uniqueName('hang-half-buffer');
    const runs: string[] = [];
    const hang = aGate();
    const member = aMember({
      streamPrefix,
      runtimeMaxConcurrency: 2,
      maxBufferedEntries: 10,
      handler: async (message: StreamMessage<KeyedPayload>) => {
        runs.push(label(message));
        if (message.shardIndex === 0) await hang.opened;
      },
    });
    await member.start();
    onTestFinished(() => hang.open());
    await send(streamPrefix, 0, [1, 2, 3, 4, 5, 6, 7, 8]);
    await pollUntil("shard 0's handler to start", async () => runs.includes('0:1:1'));
    await pollUntil("shard 0's entries read", async () => member.stats().bufferedEntries === 7);
    await send(streamPrefix, 1, [1, 2, 3]);
    await pollUntil("shard 1's entries handled beside the hung call", async () => runs.includes('1:3:1'), { timeoutMs: 5000 });
    expect(runs.filter((run) => run.startsWith('0:'))).toEqual(['0:1:1']);
    hang.open();
    await pollUntil("shard 0's entries handled", async () => runs.includes('0:8:1'));
    await settledShards(streamPrefix);
  });

  it('ackMode manual: an entry of shard 0 left unacked past handlerStallMs gives the worker back to shard 1, visibly', async () => {
    const streamPrefix = uniqueName('unacked');
    const runs: string[] = [];
    const later: StreamMessage<KeyedPayload>[] = [];
    const member = aMember({
      streamPrefix,
      ackMode: 'manual',
      handlerStallMs: 1000,
      handler: (message: StreamMessage<KeyedPayload>) => {
        runs.push(label(message));
        if (message.shardIndex === 0 && message.payload.seq === 1) later.push(message);
        else message.ack().catch(() => undefined);
      },
    });
    await member.start();
    onTestFinished(() => void later[0]?.ack().catch(() => undefined));
    const [unacked] = await send(streamPrefix, 0, [1, 2]);
    await pollUntil("shard 0's handler to run", async () => later.length === 1);
    await send(streamPrefix, 1, [1, 2]);
    await pollUntil("shard 1's entries handled while shard 0's entry waits for its ack", async () => runs.includes('1:2:1'), {
      timeoutMs: 5000,
    });
    expect(member.stats().problems).toEqual([expect.stringMatching(new RegExp(`^shard 0: ${unacked.id} .*handlerStallMs`))]);
    expect(runs).not.toContain('0:2:1');
    await later[0].ack();
    await pollUntil("shard 0's next entry handled", async () => runs.includes('0:2:1'));
    expect(member.stats().problems).toEqual([]);
    await settledShards(streamPrefix);
  });
});

describe('one worker, two shards: a failing dead-letter write', () => {
  it("a dead-letter write failing on shard 0 (retried with backoff) does not stop shard 1; shard 0's next entry waits", async () => {
    const streamPrefix = uniqueName('dlq-fails');
    const deadLetterKey = new KeyBuilder().shardDeadLetterStream(streamPrefix, 0, 'group');
    await redis.client().set(deadLetterKey, 'not a stream');
    const runs: string[] = [];
    const member = aMember({
      streamPrefix,
      maxAttempts: 1,
      handler: (message: StreamMessage<KeyedPayload>) => {
        runs.push(label(message));
        if (message.shardIndex === 0 && message.payload.seq === 1) throw new Error('poison');
      },
    });
    const failures: string[] = [];
    member.on('error', (error) => /writing the dead letter/.test(error.message) && failures.push(error.message));
    await member.start();
    const [poison] = await send(streamPrefix, 0, [1, 2]);
    // Four failed writes: the write's backoff (100 ms doubling) has reached 800 ms; the key stays
    // a string, so before the fix shard 1 never ran however long the test waited.
    await pollUntil('four failed writes', async () => failures.length >= 4);
    await send(streamPrefix, 1, [1, 2]);
    await pollUntil("shard 1's entries handled while the dead letter waits", async () => runs.includes('1:2:1'), { timeoutMs: 4000 });
    expect(member.stats().problems).toEqual([
      expect.stringMatching(new RegExp(`^shard 0: writing the dead letter of ${poison.id} failed`)),
    ]);
    expect(runs).toEqual(['0:1:1', '1:1:1', '1:2:1']);

    await redis.client().del(deadLetterKey);
    await pollUntil("shard 0's next entry handled", async () => runs.includes('0:2:1'), { timeoutMs: 10_000 });
    expect(member.stats().problems).toEqual([]);
    await settledShards(streamPrefix);
  });
});

describe('handlerStallMs at its extremes (SPEC 10.7)', () => {
  it('under a second and more than a day are refused naming the option; a second and a day are taken', () => {
    const options = { streamPrefix: 'extremes', consumerGroup: 'group', handler: () => undefined };
    for (const refused of [0, 1, 999, 86_400_001]) {
      expect(() => new CoordinatedMember(redis.client(), { ...options, handlerStallMs: refused })).toThrow(/handlerStallMs/);
    }
    expect(() => new CoordinatedMember(redis.client(), { ...options, handlerStallMs: 1000 })).not.toThrow();
    expect(() => new CoordinatedMember(redis.client(), { ...options, handlerStallMs: 86_400_000 })).not.toThrow();
    // The default follows a shorter sessionTimeoutMs only down to the minimum.
    expect(() => new CoordinatedMember(redis.client(), { ...options, sessionTimeoutMs: 200 })).not.toThrow();
  });

  it("at its minimum (1 s) every call stalls, yet each shard's entries run one at a time, in order, each once; the problems clear", async () => {
    const streamPrefix = uniqueName('stall-min');
    const recorder = new HandlerRecorder();
    const member = aMember({
      streamPrefix,
      handlerStallMs: 1000,
      handler: recorder.handler('m', () => new Promise((resolve) => setTimeout(resolve, 1100))),
    });
    let stalls = 0;
    member.on('error', (error) => /handlerStallMs/.test(error.message) && stalls++);
    await member.start();
    await send(streamPrefix, 0, [1, 2, 3]);
    await send(streamPrefix, 1, [1, 2, 3]);
    await pollUntil('every entry handled', async () => recorder.distinctEntries() === 6, { timeoutMs: 15_000 });
    await settledShards(streamPrefix);
    expect(recorder.overlaps()).toEqual([]);
    expect(recorder.duplicates()).toEqual([]);
    for (const shard of [0, 1]) {
      expect(recorder.runs.filter((r) => r.shardIndex === shard).map((r) => r.seq)).toEqual([1, 2, 3]);
    }
    expect(stalls).toBeGreaterThan(0);
    expect(member.stats().problems).toEqual([]);
  }, 30_000);

  it('handler calls running at once stay within twice runtimeMaxConcurrency however many stall: past that, new work waits for a worker, said in the problems', async () => {
    const streamPrefix = uniqueName('stall-bound');
    const hang = aGate();
    let running = 0;
    let most = 0;
    const member = aMember({
      streamPrefix,
      shardCount: 8,
      lanes: 8,
      runtimeMaxConcurrency: 2,
      handlerStallMs: 1000,
      handler: async () => {
        running++;
        most = Math.max(most, running);
        await hang.opened;
        running--;
      },
    });
    let stalls = 0;
    member.on('error', (error) => /handlerStallMs/.test(error.message) && stalls++);
    await member.start();
    onTestFinished(() => hang.open());
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 64 }, (_, seq) => ({ key: `k${seq}`, payload: { seq } })),
    );
    // Two calls stall and give their workers to two more, which stall in turn and keep theirs.
    await pollUntil('four calls stalled', async () => stalls >= 4, { timeoutMs: 10_000 });
    // Another stall bound passes: unbounded, two more calls would have started and stalled by now.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(most).toBe(4);
    expect(member.stats().activeHandlers).toBe(4);
    expect(member.stats().problems.filter((p) => /keeps its worker: .*new work waits for a worker/.test(p))).toHaveLength(2);
    hang.open();
    await pollUntil('the calls to end', async () => running === 0);
    await settledShards(streamPrefix);
    expect(member.stats().problems).toEqual([]);
  }, 40_000);
});

describe('two shards: one that cannot be claimed or taken over', () => {
  it('a claim failing on shard 0 (its stream key is not a stream) does not stop shard 1; a problems line names shard 0 until the claim succeeds', async () => {
    const streamPrefix = uniqueName('claim-fails');
    const shard0 = new KeyBuilder().shardStream(streamPrefix, 0);
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    await redis.client().set(shard0, 'not a stream');
    const runs: string[] = [];
    const member = aMember({ streamPrefix, handler: (message: StreamMessage<KeyedPayload>) => void runs.push(label(message)) });
    const failures: string[] = [];
    member.on('error', (error) => /shard 0: claiming it failed/.test(error.message) && failures.push(error.message));
    await member.start();
    await send(streamPrefix, 1, [1, 2]);
    await pollUntil("shard 1's entries handled", async () => runs.includes('1:2:1'), { timeoutMs: 5000 });
    expect(member.stats().problems).toEqual([expect.stringMatching(/^shard 0: claiming it failed .*WRONGTYPE/)]);
    expect(failures[0]).toMatch(/WRONGTYPE/);

    await redis.client().del(shard0);
    await pollUntil('shard 0 claimed', async () => member.stats().problems.length === 0, { timeoutMs: 10_000 });
    await send(streamPrefix, 0, [1]);
    await pollUntil("shard 0's entry handled", async () => runs.includes('0:1:1'));
    await settledShards(streamPrefix);
  });

  it('a takeover failing on shard 0 (its consumer group destroyed meanwhile) does not stop shard 1; a problems line names shard 0 until it succeeds', async () => {
    const streamPrefix = uniqueName('takeover-fails');
    const shard0 = new KeyBuilder().shardStream(streamPrefix, 0);
    const proxy = await aProxy();
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    // Shard 0's first takeover page waits at the proxy while its consumer group is destroyed: that
    // page, and every try after it, fails (NOGROUP) until the group is there again.
    const takeover = proxy.holdNextRequest((request) => request.includes(`${shard0}\r\n`) && request.includes('\r\nall\r\n'));
    const runs: string[] = [];
    const member = aMember(
      { streamPrefix, handler: (message: StreamMessage<KeyedPayload>) => void runs.push(label(message)) },
      redis.clientAt(proxy.url),
    );
    await member.start();
    await takeover.arrived;
    await redis.client().xgroup('DESTROY', shard0, 'group');
    takeover.release();
    await send(streamPrefix, 1, [1, 2]);
    await pollUntil("shard 1's entries handled", async () => runs.includes('1:2:1'), { timeoutMs: 5000 });
    expect(member.stats().problems).toEqual([expect.stringMatching(/^shard 0: taking over its pending entries failed .*NOGROUP/)]);

    await redis.client().xgroup('CREATE', shard0, 'group', '0', 'MKSTREAM');
    await pollUntil('shard 0 taken over', async () => member.stats().problems.length === 0, { timeoutMs: 10_000 });
    await send(streamPrefix, 0, [1]);
    await pollUntil("shard 0's entry handled", async () => runs.includes('0:1:1'));
    await settledShards(streamPrefix);
    await member.stop(); // through the proxy, before it stops
  });
});

describe('one shard whose keys are lost (SPEC 10.8)', () => {
  it('a shard whose stream and consumer group are gone (an eviction, a failover, a DEL) stops only itself: the other shards are read on; an error names it and it is claimed again, its group recreated', async () => {
    const streamPrefix = uniqueName('lost-shard');
    const handled: string[] = [];
    const errors: string[] = [];
    const member = aMember({
      streamPrefix,
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      handler: async (message: StreamMessage<KeyedPayload>) => void handled.push(label(message)),
    });
    member.on('error', (error) => errors.push(error.message));
    await member.start();
    for (const shard of [0, 1, 2, 3]) await send(streamPrefix, shard, [1]);
    await pollUntil('the first round handled', async () => handled.length === 4);
    await redis.client().del(new KeyBuilder().shardStream(streamPrefix, 2));
    for (const shard of [0, 1, 3]) await send(streamPrefix, shard, [2]);
    await pollUntil('the other shards read on', async () => ['0:2:1', '1:2:1', '3:2:1'].every((l) => handled.includes(l)), {
      timeoutMs: 5000,
    });
    expect(errors).toContainEqual(expect.stringMatching(/^shard 2: its stream or consumer group is gone .*NOGROUP/));
    // Claimed again: the group is back, and shard 2's new entries are read.
    await send(streamPrefix, 2, [2]);
    await pollUntil("shard 2's new entry handled", async () => handled.includes('2:2:1'), { timeoutMs: 5000 });
    expect(member.stats().problems).toEqual([]);
    await settledShards(streamPrefix);
  });

  it("sharing one read connection (the process's read hub), one member's lost shard stops neither its other shards nor the other member's", async () => {
    const lostPrefix = uniqueName('lost-shared');
    const otherPrefix = uniqueName('other-shared');
    const handled: string[] = [];
    const record = (name: string) => async (message: StreamMessage<KeyedPayload>) => void handled.push(`${name}/${label(message)}`);
    const errors: string[] = [];
    const member = aMember({ streamPrefix: lostPrefix, shardCount: 4, runtimeMaxConcurrency: 4, handler: record('a') });
    const other = aMember({ streamPrefix: otherPrefix, shardCount: 4, runtimeMaxConcurrency: 4, handler: record('b') });
    member.on('error', (error) => errors.push(error.message));
    await Promise.all([member.start(), other.start()]);
    for (const shard of [0, 1, 2, 3]) {
      await send(lostPrefix, shard, [1]);
      await send(otherPrefix, shard, [1]);
    }
    await pollUntil('the first round handled', async () => handled.length === 8);
    await redis.client().del(new KeyBuilder().shardStream(lostPrefix, 2));
    for (const shard of [0, 1, 3]) await send(lostPrefix, shard, [2]);
    for (const shard of [0, 1, 2, 3]) await send(otherPrefix, shard, [2]);
    const expected = ['a/0:2:1', 'a/1:2:1', 'a/3:2:1', 'b/0:2:1', 'b/1:2:1', 'b/2:2:1', 'b/3:2:1'];
    await pollUntil('the other shards read on', async () => expected.every((l) => handled.includes(l)), { timeoutMs: 5000 });
    expect(errors).toContainEqual(expect.stringMatching(/^shard 2: its stream or consumer group is gone .*NOGROUP/));
    await send(lostPrefix, 2, [2]);
    await pollUntil("the lost shard's new entry handled", async () => handled.includes('a/2:2:1'), { timeoutMs: 5000 });
    expect(member.stats().problems).toEqual([]);
    expect(other.stats().problems).toEqual([]);
  });
});
