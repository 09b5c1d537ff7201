import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import type { HeartbeatObservation } from '../../packages/core/src/redis/coordinator-options';
import { loadScriptSource } from '../../packages/core/src/redis/scripts';
import { HandlerRecorder, keyedMessages } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// SPEC 9.1 on the member's command connection: a heartbeat renews the lease only if the member acts
// on its answer, and a connection that stopped answering is not waited on for ever.
const redis = useRedisServer();
const aMember = memberFactory(redis);
const aProxy = proxyFactory(redis);

const heartbeatScript = TcpProxy.command('EVALSHA', createHash('sha1').update(loadScriptSource('heartbeat-14.lua')).digest('hex'));

function admin() {
  return new CoordinatorAdmin(redis.client());
}

async function memberState(streamPrefix: string, memberId: string) {
  return (await admin().describeGroup(streamPrefix, 'group')).members.find((m) => m.memberId === memberId);
}

describe('a heartbeat that reaches Redis after its member stopped waiting', () => {
  it('renews nothing: a member whose heartbeats all come late is expired, and the others read its shards', async () => {
    const streamPrefix = uniqueName('late-heartbeats');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    // Every answer the late member's coordinator client gets, whenever it comes (the member itself
    // stops waiting after a third of the session timeout).
    const answers: (HeartbeatObservation & { sentAt: number })[] = [];
    const late = aMember(
      {
        streamPrefix,
        shardCount: 2,
        sessionTimeoutMs: 3000,
        handler: recorder.handler('late'),
        coordinator: { heartbeatIntervalMs: 200, onHeartbeat: (o) => answers.push({ ...o, sentAt: performance.now() - o.roundTripMs }) },
      },
      redis.clientAt(proxy.url),
    );
    const steady = aMember({ streamPrefix, shardCount: 2, sessionTimeoutMs: 3000, handler: recorder.handler('steady') });
    await late.start();
    await steady.start();
    await pollUntil('one shard each', async () => late.ownedShards().length === 1 && steady.ownedShards().length === 1);
    let leaseLost = false;
    late.on('lease-lost', () => (leaseLost = true));

    // Each of its heartbeats now reaches Redis 1.5 s after it was sent: past the 1 s the member waits
    // for an answer, well within the 3 s session. Before the fix Redis took every one of them (the
    // member never saw one answer), kept the member ACTIVE for good and handed it a shard it never read.
    const delayedFrom = performance.now();
    proxy.delayMatching(heartbeatScript, 1500);
    await pollUntil('the late member gives its lease up', async () => leaseLost, { timeoutMs: 6000 });
    const description = await pollUntil(
      'the late member expired by Redis, the steady one owning both shards',
      async () => {
        const d = await admin().describeGroup(streamPrefix, 'group');
        const owner = new Set(d.shards.map((s) => s.owner));
        return (
          d.members.find((m) => m.memberId === late.memberId)?.state === 'EXPIRED' && owner.size === 1 && owner.has(steady.memberId) && d
        );
      },
      { timeoutMs: 8000 },
    ).catch(async (error: Error) => {
      throw new Error(`${error.message}: late member ${JSON.stringify(await memberState(streamPrefix, late.memberId))}`);
    });
    expect(description.group.state).toBe('STABLE');
    // Redis answered every late heartbeat, and refused each one: none renewed the lease.
    const lateAnswers = answers.filter((o) => o.sentAt > delayedFrom && o.roundTripMs > 1000 && o.response);
    expect(lateAnswers.length).toBeGreaterThan(0);
    expect(
      lateAnswers
        .filter((o) => o.response!.errorCode !== 'DEADLINE_EXCEEDED')
        .map((o) => `${o.request.memberEpoch}: ${o.response!.errorCode}`),
    ).toEqual([]);

    // Nothing waits for the late member: what is sent now is handled by the steady one.
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(keyedMessages(4, 2, 'during'));
    await pollUntil('entries sent meanwhile handled', async () => recorder.distinctEntries() === 8);

    // The link fast again: the member rejoins and gets its share back.
    proxy.clearFaults();
    await pollUntil('the member back with a shard', async () => late.ownedShards().length === 1 && steady.ownedShards().length === 1, {
      timeoutMs: 10_000,
    });
  });
});

describe('a command connection that stops answering without closing (half-open)', () => {
  it('with resetStuckConnection, is reset after two heartbeats got no answer: the member reads on, and the acknowledgement that waited on it is decided', async () => {
    const streamPrefix = uniqueName('half-open');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let entry2 = '';
    const acknowledged: { ids: string[]; accepted: boolean }[] = [];
    const errors: string[] = [];
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sessionTimeoutMs: 3000,
        blockMs: 200,
        sweepIntervalMs: 500,
        resetStuckConnection: true,
        handler: recorder.handler('m', async (message) => {
          if (message.payload.seq === 2 && message.key === 'before-0') {
            entry2 = message.id;
            await gate;
          }
        }),
      },
      redis.clientAt(proxy.url),
    );
    member.on('acknowledged', (a) => acknowledged.push({ ids: a.ids, accepted: a.accepted }));
    member.on('error', (e: Error) => errors.push(e.message));
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(keyedMessages(1, 2, 'before'));
    await pollUntil('entry 2 running', async () => entry2 !== '');

    // Both of the member's connections (commands and blocking reads) go silent; entry 2's ack is
    // sent into the silence.
    proxy.blackholeOpenConnections();
    release();
    // Two heartbeat timeouts (1 s each) and the retry between them.
    await pollUntil(
      'the command connection reset',
      async () => errors.some((e) => /2 heartbeats in a row got no answer within 1000 ms; the command connection was reset/.test(e)),
      { timeoutMs: 6000 },
    );

    // The member reads on over the new connections (its lease may have been lost meanwhile: then it rejoined).
    await producer.sendBatch(keyedMessages(1, 2, 'after'));
    await pollUntil('the entries sent after the reset handled', async () => recorder.distinctEntries() === 4, { timeoutMs: 10_000 });
    // Entry 2's acknowledgement was resent on the new connection and decided there: accepted, or
    // refused (a new grant's token) and the entry run again and acknowledged. Nothing stays pending.
    await pollUntil('entry 2 acknowledged or refused', async () => acknowledged.some((a) => a.ids.includes(entry2)));
    await pollUntil('nothing pending in the group', async () =>
      (await admin().describeGroup(streamPrefix, 'group')).shards.every((s) => s.pending === 0 && s.lag === 0),
    );
  });
});

describe('an acknowledgement connection that stops answering without closing (ackWaitForReplicas)', () => {
  it('is reset after two acknowledgement calls got no answer, says so while it lasts, and every finished entry is acknowledged', async () => {
    const streamPrefix = uniqueName('half-open-acks');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    const errors: string[] = [];
    const problems = new Set<string>();
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sessionTimeoutMs: 3000,
        blockMs: 200,
        // This Redis has no replica: each WAIT returns after 1 ms, counting none (an `error` each time).
        ackWaitForReplicas: { replicas: 1, timeoutMs: 1 },
        handler: recorder.handler('m'),
      },
      redis.clientAt(proxy.url),
    );
    member.on('error', (e: Error) => errors.push(e.message));
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch(keyedMessages(1, 2, 'before'));
    await pollUntil(
      'the first entries acknowledged',
      async () => (await admin().describeGroup(streamPrefix, 'group')).shards[0].pending === 0,
    );

    // Only the acknowledgements' own connection sends WAIT: its next call, and all after it on that
    // connection, stop at the proxy for good (never released): a half-open connection.
    proxy.holdNextRequest(TcpProxy.command('WAIT'));
    await producer.sendBatch(keyedMessages(1, 10, 'during'));
    const watching = setInterval(() => {
      for (const line of member.stats().problems) problems.add(line);
    }, 20);
    try {
      await pollUntil(
        'the acknowledgement connection reset',
        async () =>
          errors.some((e) =>
            /acknowledgement calls in a row got no answer within 2001 ms; the acknowledgement connection was reset/.test(e),
          ),
        { timeoutMs: 8000 },
      );
      await pollUntil('every entry acknowledged', async () => {
        const shard = (await admin().describeGroup(streamPrefix, 'group')).shards[0];
        return shard.pending === 0 && shard.lag === 0;
      });
    } finally {
      clearInterval(watching);
    }
    expect([...problems].some((line) => /acknowledgements got no answer within 2001 ms/.test(line))).toBe(true);
    await pollUntil('the problems line gone with the next answered acknowledgement', async () => member.stats().problems.length === 0);
    expect(recorder.duplicates()).toEqual([]);
    await member.stop();
  });
});

describe('stop() while an acknowledgement waits for an answer (the network frozen)', () => {
  it('returns within its bounds, and so does start() after abort()', async () => {
    const streamPrefix = uniqueName('stop-frozen-ack');
    const proxy = await aProxy();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let running = false;
    const settings = { streamPrefix, shardCount: 1, sessionTimeoutMs: 3000, blockMs: 200 };
    const member = aMember(
      {
        ...settings,
        handler: async () => {
          running = true;
          await gate;
        },
      },
      redis.clientAt(proxy.url),
    );
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    await pollUntil('the handler running', async () => running);
    try {
      // The handler finishes into a frozen network: its acknowledgement never gets an answer.
      proxy.freeze();
      release();
      // Bounds (docs/runtime.md): the read loop blockMs + max(2 s, session / 3), then the last
      // acknowledgement flush max(2 s, session / 3), the heartbeat in flight and the leave a third of
      // the session each: 6.2 s at most here.
      let startedAt = performance.now();
      await member.stop();
      expect(performance.now() - startedAt).toBeLessThan(7000);

      const again = aMember({ ...settings, handler: () => undefined }, redis.clientAt(proxy.url));
      await again.start().catch(() => undefined); // frozen: fails after a third of the session
      await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 2 } });
      again.abort();
      startedAt = performance.now();
      // Aborted while frozen; start() waits for the abort's poller (its acknowledgements bounded as in
      // stop()), then fails to reach Redis (a third of the session).
      await expect(again.start()).rejects.toThrow();
      expect(performance.now() - startedAt).toBeLessThan(5000);
    } finally {
      proxy.thaw();
    }
  });
});

describe('a dead-letter write on a connection that stops answering', () => {
  it('is bounded: an error and a problems line while it hangs, then written once when the connection is back', async () => {
    const streamPrefix = uniqueName('stuck-dead-letter');
    const proxy = await aProxy();
    const errors: string[] = [];
    const problems = new Set<string>();
    const member = aMember(
      {
        streamPrefix,
        shardCount: 1,
        sessionTimeoutMs: 3000,
        blockMs: 200,
        maxAttempts: 1,
        resetStuckConnection: true,
        handler: () => {
          throw new Error('poison');
        },
      },
      redis.clientAt(proxy.url),
    );
    member.on('error', (e: Error) => errors.push(e.message));
    await member.start();
    // The dead letter's script (EVAL on its first use: the only call naming the dead-letter stream),
    // and all after it on the command connection, stop at the proxy.
    proxy.holdNextRequest((request) => request.includes(':dead-letter:'));
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: { seq: 1 } });
    const watching = setInterval(() => {
      for (const line of member.stats().problems) problems.add(line);
    }, 20);
    try {
      await pollUntil(
        'the dead-letter write reported as unanswered',
        async () => errors.some((e) => /writing the dead letter of .* failed \(try 1\): no answer within 2000 ms/.test(e)),
        { timeoutMs: 5000 },
      );
      // The heartbeats, stuck behind it, reset the connection; the write is sent again there.
      await pollUntil('the dead letter written and the entry acknowledged', async () => {
        const shard = (await admin().describeGroup(streamPrefix, 'group')).shards[0];
        return shard.pending === 0 && shard.lag === 0;
      });
    } finally {
      clearInterval(watching);
    }
    expect([...problems].some((line) => /writing the dead letter of .* failed/.test(line))).toBe(true);
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toHaveLength(1);
    await member.stop();
  });
});

describe('a sweep on a command connection that stops answering', () => {
  it("is an error naming the shard within its bound, instead of holding every shard's reads silently", async () => {
    const streamPrefix = uniqueName('stuck-sweep');
    const recorder = new HandlerRecorder();
    const proxy = await aProxy();
    const errors: string[] = [];
    const member = aMember(
      { streamPrefix, shardCount: 2, sessionTimeoutMs: 3000, blockMs: 200, sweepIntervalMs: 300, handler: recorder.handler('m') },
      redis.clientAt(proxy.url),
    );
    member.on('error', (e: Error) => errors.push(e.message));
    await member.start();
    await pollUntil('both shards read', async () => member.ownedShards().length === 2);
    // The own-pending sweep's XPENDING (only the sweeps send it), and all after it on the command
    // connection, stop at the proxy until released.
    const held = proxy.holdNextRequest(TcpProxy.command('XPENDING'));
    try {
      await pollUntil(
        'the sweep reported as unanswered',
        async () => errors.some((e) => /sweeping it failed \(no answer within 2000 ms/.test(e)),
        { timeoutMs: 6000 },
      );
    } finally {
      held.release();
    }
    // The connection answers again: the member reads on (it may have rejoined meanwhile).
    await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(keyedMessages(4, 2, 'after'));
    await pollUntil('the entries sent afterwards handled', async () => recorder.distinctEntries() === 8, { timeoutMs: 10_000 });
  });
});
