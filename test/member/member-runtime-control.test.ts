import { describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  FencedInstanceIdError,
  HandlerAbortedError,
  type StreamMessage,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { HandlerRecorder, type KeyedPayload, keyedMessages } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis);
const aProxy = proxyFactory(redis);

/** A promise to await and a function that resolves it: a handler waits on it until the test says so. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

function send(streamPrefix: string, messages: { key?: string; shardIndex?: number; payload: KeyedPayload }[]) {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(messages);
}

async function describeGroup(streamPrefix: string) {
  return new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'group');
}

/** Every shard owned, nothing pending or left to read: every entry sent was handled and acknowledged. */
async function drained(streamPrefix: string) {
  return pollUntil('every entry handled and acknowledged', async () => {
    const d = await describeGroup(streamPrefix);
    return d.shards.every((s) => s.lag === 0 && s.pending === 0) && d;
  });
}

/** A handler that waits until its signal fires, and records why. */
function waitsForItsSignal(reasons: string[], started: { open: () => void }) {
  return (message: StreamMessage<KeyedPayload>) =>
    new Promise<void>((_, reject) => {
      started.open();
      message.signal.addEventListener('abort', () => {
        const reason = message.signal.reason as HandlerAbortedError;
        reasons.push(reason instanceof HandlerAbortedError ? reason.reason : `not a HandlerAbortedError: ${String(reason)}`);
        reject(reason);
      });
    });
}

describe('pause() and resume()', () => {
  it('a paused member fetches and starts nothing, its in-flight handlers finish and ack, it answers revocations at once, and resumes where it stopped', async () => {
    const streamPrefix = uniqueName('pause');
    const recorder = new HandlerRecorder();
    const inFlight = gate();
    const release = gate();
    let paused = false;
    const ranWhilePaused: string[] = [];
    const a = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 4,
      runtimeMaxConcurrency: 4,
      // A revocation waits this long for an in-flight handler: an answer well before it is prompt.
      rebalanceTimeoutMs: 60_000,
      revocationTimeoutMs: 30_000,
      handler: recorder.handler('a', async (message) => {
        if (paused) ranWhilePaused.push(message.id);
        if (message.payload.seq === 1) {
          inFlight.open();
          await release.opened;
        }
      }),
    });
    await a.start();
    await send(streamPrefix, keyedMessages(8, 1, 'first'));
    await inFlight.opened;

    a.pause();
    paused = true;
    expect(a.isPaused()).toBe(true);
    expect(a.stats()).toMatchObject({ paused: true, running: true });
    // Entries sent while paused are not fetched; the handlers in flight finish and are acknowledged.
    await send(
      streamPrefix,
      keyedMessages(8, 5, 'later').map((m) => ({ ...m, payload: { seq: m.payload.seq + 1 } })),
    );
    release.open();
    await pollUntil(
      'the in-flight handlers to finish and be acknowledged',
      async () => a.stats().activeHandlers === 0 && recorder.runs.length > 0,
    );

    // Still a member with its shards: a second member gets half of them at once, the paused one
    // answering the revocation without any handler running.
    const b = aMember({ streamPrefix, memberId: 'b', runtimeMaxConcurrency: 4, handler: recorder.handler('b') });
    await b.start();
    await pollUntil('b to own two shards', async () => b.ownedShards().length === 2);
    expect(a.ownedShards()).toHaveLength(2);
    expect(a.stats().joined).toBe(true);
    await pollUntil("b to handle its shards' entries", async () => recorder.runs.some((r) => r.memberId === 'b'));
    expect(ranWhilePaused).toEqual([]);

    paused = false;
    a.resume();
    expect(a.isPaused()).toBe(false);
    await drained(streamPrefix);
    await pollUntil('all 48 entries handled', async () => recorder.distinctEntries() === 48);
    expect(recorder.duplicates()).toEqual([]);
    expect(recorder.overlaps()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
  });
});

describe('stop() and start() again', () => {
  it('a stopped member joins again with the same memberId, shares the shards again, and nothing is lost or run twice at once', async () => {
    const streamPrefix = uniqueName('restart');
    const recorder = new HandlerRecorder();
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 4, runtimeMaxConcurrency: 2, handler: recorder.handler('a') });
    const b = aMember({ streamPrefix, memberId: 'b', runtimeMaxConcurrency: 2, handler: recorder.handler('b') });
    await a.start();
    await b.start();
    await send(streamPrefix, keyedMessages(8, 10, 'one'));
    await pollUntil('a to have shards', async () => a.ownedShards().length === 2);

    await a.stop();
    expect(a.isRunning()).toBe(false);
    expect((await describeGroup(streamPrefix)).members.find((m) => m.memberId === 'a')!.state).toBe('LEFT');
    await send(streamPrefix, keyedMessages(8, 10, 'two'));
    await pollUntil('b to own every shard', async () => b.ownedShards().length === 4);

    await a.start();
    expect(a.isRunning()).toBe(true);
    await send(streamPrefix, keyedMessages(8, 10, 'three'));
    await pollUntil('a to own two shards again', async () => a.ownedShards().length === 2);
    // stop() and start() once more, with nothing in between.
    await a.stop();
    await a.start();
    await pollUntil('a to own two shards again', async () => a.ownedShards().length === 2);
    // It reads again (its blocking connection, closed by stop(), is open again).
    await send(streamPrefix, keyedMessages(8, 10, 'four'));
    await drained(streamPrefix);
    expect(recorder.distinctEntries()).toBe(320);
    expect(recorder.overlaps()).toEqual([]);
    expect(recorder.orderViolations()).toEqual([]);
    expect(recorder.runs.filter((r) => r.memberId === 'a' && r.key.startsWith('four')).length).toBeGreaterThan(0);
    const member = (await describeGroup(streamPrefix)).members.find((m) => m.memberId === 'a')!;
    expect(member.state).toBe('ACTIVE');
  });

  it('a start() called while stop() is under way waits for it, then joins', async () => {
    const streamPrefix = uniqueName('restart-early');
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 2, handler: () => undefined });
    await a.start();
    const stopping = a.stop();
    const starting = a.start();
    await stopping;
    await starting;
    expect(a.isRunning()).toBe(true);
    await pollUntil('a to own both shards', async () => a.ownedShards().length === 2);
  });

  it('after abort() the same instance rejoins at once (it is not a second process); another instance with its memberId is still refused', async () => {
    const streamPrefix = uniqueName('restart-abort');
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 2, sessionTimeoutMs: 30_000, handler: () => undefined });
    await a.start();
    await pollUntil('a to own both shards', async () => a.ownedShards().length === 2);
    a.abort(); // no leave: the coordinator still counts the membership live for 30 s
    await a.start();
    await pollUntil('a to own both shards again', async () => a.ownedShards().length === 2);

    const other = new CoordinatedMember(redis.client(), { streamPrefix, consumerGroup: 'group', memberId: 'a', handler: () => undefined });
    other.on('error', () => undefined);
    await expect(other.start()).rejects.toBeInstanceOf(FencedInstanceIdError);
    expect(a.ownedShards()).toEqual([0, 1]);
  });

  it('a member stopped for good by FENCED_INSTANCE_ID cannot be started again', async () => {
    const streamPrefix = uniqueName('restart-fatal');
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 1, handler: () => undefined });
    await a.start();
    const other = aMember({ streamPrefix, memberId: 'a', handler: () => undefined });
    await expect(other.start()).rejects.toBeInstanceOf(FencedInstanceIdError);
    await expect(other.start()).rejects.toBeInstanceOf(FencedInstanceIdError);
  });
});

describe('setRuntimeMaxConcurrency()', () => {
  it('changes how many handlers run at once without leaving the group; a lower value lets the calls in flight finish', async () => {
    const streamPrefix = uniqueName('concurrency');
    const recorder = new HandlerRecorder();
    let active = 0;
    let maxActive = 0;
    const gates = new Map<string, () => void>();
    const a = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 4,
      runtimeMaxConcurrency: 1,
      shutdownTimeoutMs: 100,
      handler: recorder.handler('a', async (message) => {
        active += 1;
        maxActive = Math.max(maxActive, active);
        await new Promise<void>((resolve) => gates.set(`${message.shardIndex}/${message.id}`, resolve));
        active -= 1;
      }),
    });
    await a.start();
    const epoch = a.currentMemberEpoch();
    await send(streamPrefix, keyedMessages(8, 3));
    await pollUntil('one handler running', async () => active === 1);
    expect(maxActive).toBe(1);

    a.setRuntimeMaxConcurrency(3);
    await pollUntil('three handlers running', async () => active === 3);
    await pollUntil(
      'the coordinator to know the new capacity',
      async () => (await describeGroup(streamPrefix)).members.find((m) => m.memberId === 'a')!.runtimeMaxConcurrency === 3,
    );

    a.setRuntimeMaxConcurrency(1);
    maxActive = 0;
    const running = [...gates.keys()];
    expect(running).toHaveLength(3);
    for (const id of running) gates.get(id)!();
    // Let everything through one at a time from now on.
    const drain = setInterval(() => {
      for (const [id, open] of gates) if (!running.includes(id)) open();
    }, 5);
    try {
      await pollUntil('all 24 entries handled', async () => recorder.distinctEntries() === 24);
    } finally {
      clearInterval(drain);
    }
    expect(maxActive).toBe(1);
    expect(a.currentMemberEpoch()).toBe(epoch);
    expect(recorder.overlaps()).toEqual([]);
    expect(recorder.duplicates()).toEqual([]);

    expect(() => a.setRuntimeMaxConcurrency(0)).toThrow(/runtimeMaxConcurrency.*0/);
    expect(() => a.setRuntimeMaxConcurrency(2.5)).toThrow(RangeError);
  });
});

describe('a synchronous handler that changes the member', () => {
  it('calling resume() or setRuntimeMaxConcurrency() from inside starts no handler over the limit', async () => {
    const streamPrefix = uniqueName('reentrant');
    let active = 0;
    let maxActive = 0;
    let handled = 0;
    const member: CoordinatedMember<KeyedPayload> = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 4,
      runtimeMaxConcurrency: 1,
      handler: () => {
        active += 1;
        maxActive = Math.max(maxActive, active);
        // Each call makes the dispatcher look for work again, from inside this call.
        if (handled % 2 === 0) member.setRuntimeMaxConcurrency(1);
        else {
          member.pause();
          member.resume();
        }
        handled += 1;
        active -= 1;
      },
    });
    await member.start();
    await send(streamPrefix, keyedMessages(8, 5));
    await pollUntil('all 40 entries handled', async () => handled === 40);
    // Before: the call inside started the next entry's handler while this one ran (2 at once).
    expect(maxActive).toBe(1);
  });
});

describe('message.signal', () => {
  it('fires on handler timeout (reason handler-timeout); the retry gets a fresh signal', async () => {
    const streamPrefix = uniqueName('signal-timeout');
    const reasons: string[] = [];
    const started = gate();
    const signals: AbortSignal[] = [];
    const a = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 1,
      handlerTimeoutMs: 200,
      maxAttempts: 2,
      retryBackoffMs: 10,
      handler: (message) => {
        signals.push(message.signal);
        if (signals.length === 1) return waitsForItsSignal(reasons, started)(message);
        return undefined;
      },
    });
    await a.start();
    await send(streamPrefix, [{ key: 'k', payload: { seq: 1 } }]);
    await drained(streamPrefix);
    expect(reasons).toEqual(['handler-timeout']);
    expect(signals).toHaveLength(2);
    expect(signals[1].aborted).toBe(false);
  });

  it('fires on revocation once revocationTimeoutMs passed (reason revoked), before the next owner runs the entry; and on stop after shutdownTimeoutMs (reason stopped)', async () => {
    const streamPrefix = uniqueName('signal-revoked');
    const aborted: { shardIndex: number; reason: string; at: number }[] = [];
    const hang = gate();
    const a = aMember({
      streamPrefix,
      memberId: 'a',
      shardCount: 2,
      runtimeMaxConcurrency: 2,
      rebalanceTimeoutMs: 5000,
      revocationTimeoutMs: 300,
      shutdownTimeoutMs: 200,
      // Ignores its signal: the member must not wait for it, nor let it overlap the next owner unwarned.
      handler: async (message) => {
        message.signal.addEventListener('abort', () =>
          aborted.push({
            shardIndex: message.shardIndex,
            reason: (message.signal.reason as HandlerAbortedError).reason,
            at: performance.now(),
          }),
        );
        await hang.opened;
      },
    });
    await a.start();
    await send(
      streamPrefix,
      [0, 1].map((shardIndex) => ({ key: `s${shardIndex}`, shardIndex, payload: { seq: 1 } })),
    );
    await pollUntil('both handlers running', async () => a.stats().activeHandlers === 2);

    const recorder = new HandlerRecorder();
    const b = aMember({ streamPrefix, memberId: 'b', handler: recorder.handler('b') });
    await b.start();
    const [run] = await pollUntil('b to run the entry of the shard it took', async () => recorder.runs.length > 0 && recorder.runs);
    expect(aborted.map((e) => [e.shardIndex, e.reason])).toEqual([[run.shardIndex, 'revoked']]);
    expect(aborted[0].at <= run.start).toBe(true);

    await a.stop();
    expect(aborted.map((e) => e.reason)).toEqual(['revoked', 'stopped']);
    hang.open();
  });

  it('fires when the lease is lost (reason shard-lost)', async () => {
    const streamPrefix = uniqueName('signal-lease');
    const proxy = await aProxy();
    const reasons: string[] = [];
    const started = gate();
    const a = aMember(
      {
        streamPrefix,
        memberId: 'a',
        shardCount: 1,
        sessionTimeoutMs: 600,
        shutdownTimeoutMs: 100,
        handler: waitsForItsSignal(reasons, started),
      },
      redis.clientAt(proxy.url),
    );
    await a.start();
    await send(streamPrefix, [{ key: 'k', payload: { seq: 1 } }]);
    await started.opened;
    proxy.freeze();
    await pollUntil('the signal to fire', async () => reasons.length > 0);
    expect(reasons).toEqual(['shard-lost']);
    proxy.thaw();
  });
});
