import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamProducer, shardForKey } from '@redis-stream-coordinator/core';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { type HeldRequest, TcpProxy } from '../support/tcp-proxy';
import { proxyFactory } from '../support/proxy-fixture';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const aProxy = proxyFactory(redis);
const holds: HeldRequest[] = [];

// Registered after the proxies' hook, so it runs first: held requests go on before the proxies stop.
afterEach(() => {
  for (const hold of holds.splice(0)) hold.release();
});

describe('attack: an ordered shrink whose cutover read is late', () => {
  // docs/resharding.md: on an ordered shrink a member holds, on the surviving shards, every entry
  // from switchAt on until the removed shards are drained. The hold comes from the cutover read
  // after the heartbeat that carries the new metadataVersion. When that read fails or is late, the
  // member only stops *taking new* shards (runtime.md); the surviving shards it already owns go on
  // being read and handled with no hold, so a moved key's new entry runs before its older entry on
  // the removed shard is done: per-key order breaks (SPEC 6).
  it("a moved key's new entry on a surviving shard waits for its older entry on the removed shard when the cutover read is late", async () => {
    const streamPrefix = uniqueName('attack-shrink-sync');
    let key = 'k0';
    for (let i = 0; shardForKey(key, 2) !== 1; i++) key = `k${i}`;
    const proxy = await aProxy();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const started: number[] = [];
    let firstDone = false;
    const startedBeforeFirstDone: number[] = [];
    const member = aMember(
      {
        streamPrefix,
        shardCount: 2,
        runtimeMaxConcurrency: 2,
        sessionTimeoutMs: 6000,
        handler: async (m) => {
          started.push(m.payload.seq);
          if (!firstDone && m.payload.seq !== 1) startedBeforeFirstDone.push(m.payload.seq);
          if (m.payload.seq === 1) {
            await gate;
            firstDone = true;
          }
        },
      },
      redis.clientAt(proxy.url),
    );
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    try {
      await member.start();
      await pollUntil('member owns both shards', async () => member.ownedShards().length === 2);
      expect((await producer.send({ key, payload: { seq: 1 } })).shardIndex).toBe(1);
      await pollUntil('key entry 1 running on shard 1', async () => started.includes(1));

      // The member's cutover read after the shrink is late (held at the proxy).
      const cutoverRead = proxy.holdNextRequest(TcpProxy.command('HMGET', 'cutover'));
      holds.push(cutoverRead);
      const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, {
        ordered: true,
        switchDelayMs: 100,
        graceMs: 100,
      });
      await cutoverRead.arrived;
      await pollUntil('switchAt passed', async () => {
        const [seconds, micros] = await redis.client().time();
        return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) > Date.parse(String(resized.switchAt));
      });
      expect((await producer.send({ key, payload: { seq: 2 } })).shardIndex).toBe(0);

      // Entry 2 of the key must wait for entry 1 (the hold); the member may not know the hold yet,
      // so it must not handle shard 0's new entries either.
      const early = await pollUntil('key entry 2 started', async () => started.includes(2) && 'started', { timeoutMs: 1500 }).catch(
        () => 'waited',
      );
      expect({ early, startedBeforeFirstDone }).toEqual({ early: 'waited', startedBeforeFirstDone: [] });

      // Once the read gets through and entry 1 is done, entry 2 runs: held, not lost.
      cutoverRead.release();
      release();
      await pollUntil('key entry 2 handled after entry 1', async () => started.includes(2));
      expect(started).toEqual([1, 2]);
    } finally {
      release();
      for (const hold of holds) hold.release();
    }
  });
});

describe('attack: an ordered shrink a member hears of after switchAt', () => {
  // docs/resharding.md rests on "members hear of a shrink within switchDelayMs (1 s)": "a member
  // learns through its wake-up and heartbeat in milliseconds; one that cannot reach Redis for longer
  // cannot read either". But a wake-up published while the subscriber reconnects is lost ("a lost
  // wake-up only costs one heartbeat interval", wake-hub.ts), the default heartbeat interval (3 s)
  // is longer than the default switchDelayMs, and the reader has a connection of its own that reads
  // on. Such a member handles a moved key's new entry on a surviving shard before its older entry
  // on the removed shard is done.
  it('with its wake-up lost and its next heartbeat late, a member still holds a moved key until its older entry is done', async () => {
    const streamPrefix = uniqueName('attack-shrink-late');
    let key = 'k0';
    for (let i = 0; shardForKey(key, 2) !== 1; i++) key = `k${i}`;
    const proxy = await aProxy();
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const started: number[] = [];
    let firstDone = false;
    const startedBeforeFirstDone: number[] = [];
    const member = aMember(
      {
        streamPrefix,
        shardCount: 2,
        runtimeMaxConcurrency: 2,
        sessionTimeoutMs: 3000,
        coordinator: { heartbeatIntervalMs: 1000 }, // longer than switchDelayMs (as the defaults, 3 s and 1 s)
        handler: async (m) => {
          started.push(m.payload.seq);
          if (!firstDone && m.payload.seq !== 1) startedBeforeFirstDone.push(m.payload.seq);
          if (m.payload.seq === 1) {
            await gate;
            firstDone = true;
          }
        },
      },
      redis.clientAt(proxy.url),
    );
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    try {
      await member.start();
      await pollUntil('member owns both shards', async () => member.ownedShards().length === 2);
      expect((await producer.send({ key, payload: { seq: 1 } })).shardIndex).toBe(1);
      await pollUntil('key entry 1 running on shard 1', async () => started.includes(1));

      // A connection reset: the subscriber's resubscribe and the member's next heartbeat are slow
      // (held here), so the resize's wake-up is lost and the member hears of it late.
      const resubscribe = proxy.holdNextRequest(TcpProxy.command('SUBSCRIBE'));
      const heartbeat = proxy.holdNextRequest((request) => request.includes(member.instanceId));
      holds.push(resubscribe, heartbeat);
      proxy.cut();
      await resubscribe.arrived;
      const resized = await new CoordinatorAdmin(redis.client()).resizeShards(streamPrefix, 1, { ordered: true });
      await pollUntil('switchAt passed', async () => {
        const [seconds, micros] = await redis.client().time();
        return Number(seconds) * 1000 + Math.floor(Number(micros) / 1000) > Date.parse(String(resized.switchAt));
      });
      expect((await producer.send({ key, payload: { seq: 2 } })).shardIndex).toBe(0);

      const early = await pollUntil('key entry 2 started', async () => started.includes(2) && 'started', { timeoutMs: 1500 }).catch(
        () => 'waited',
      );
      expect({ early, startedBeforeFirstDone }).toEqual({ early: 'waited', startedBeforeFirstDone: [] });

      // The member hears of the shrink, holds entry 2 until entry 1 is done, then runs it.
      for (const hold of holds) hold.release();
      release();
      await pollUntil('key entry 2 handled', async () => started.includes(2), { timeoutMs: 20_000 });
      expect(startedBeforeFirstDone).toEqual([]);
    } finally {
      release();
      for (const hold of holds) hold.release();
      await member.stop(); // while the proxy is up: a subscriber left reconnecting to nothing rejects ioredis' own resubscribe
    }
  });
});
