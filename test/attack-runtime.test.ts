import { describe, expect, it } from 'vitest';
import { FencedInstanceIdError, StreamProducer } from '@redis-stream-coordinator/core';
import { memberFactory } from './support/member-factory';
import { pollUntil } from './support/poll';
import { proxyFactory } from './support/proxy-fixture';
import { uniqueName, useRedisServer } from './support/vitest-redis';

// Attacks on the consumption runtime added in issue 17 (lanes, batches, manual acks, static
// membership, read-ahead), by someone other than its authors. Each test names the promise it breaks.
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const aProxy = proxyFactory(redis);

function sendKeyed(streamPrefix: string, count: number, key = 'k') {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(Array.from({ length: count }, (_, i) => ({ key, shardIndex: 0, payload: { seq: i + 1 } })));
}

describe('attack: a static member instance that went silent, and its replacement', () => {
  // SPEC 9.4 (one live process per member id) and SPEC 5 (a member whose lease may be lost starts no
  // handler). The coordinator lets a new instance of a static member take over once the one holding
  // it was silent for two heartbeat intervals (includes/static.lua), but the old instance counted
  // its lease from the session timeout: silent for longer than two intervals (a partition, a long GC
  // pause) and shorter than the session timeout, it went on starting handlers for what it had
  // queued, while the new instance took the same entries over and ran them too: two processes of
  // one member instance running one shard, the same entries at the same time, out of key order.
  it('the old instance starts no handler once a new instance could have taken over', async () => {
    const streamPrefix = uniqueName('attack-static-silent');
    const proxy = await aProxy();
    const starts: { who: string; seq: number; at: number }[] = [];
    const handler = (who: string) => async (message: { payload: { seq: number } }) => {
      starts.push({ who, seq: message.payload.seq, at: performance.now() });
      await new Promise((resolve) => setTimeout(resolve, 20));
    };
    const options = { streamPrefix, memberInstanceId: 'pod-0', shardCount: 1, sessionTimeoutMs: 8000, coordinator: { heartbeatIntervalMs: 100 } };
    const old = aMember({ ...options, handler: handler('old') }, redis.clientAt(proxy.url));
    const halted: Error[] = [];
    old.on('error', (error) => halted.push(error));
    await old.start();
    await sendKeyed(streamPrefix, 300);
    await pollUntil('the old instance to be busy with a full queue', async () => starts.length >= 5 && old.stats().bufferedEntries > 50);

    // The old instance can no longer reach Redis (its queue and its handlers are local: they go on).
    proxy.freeze();
    const replacement = aMember({ ...options, handler: handler('new') });
    await replacement.start(); // refused until the old one was silent for two heartbeat intervals
    const tookOverAt = performance.now();
    await pollUntil('the new instance to run entries', async () => starts.filter((s) => s.who === 'new').length >= 5);

    const oldStartsAfter = starts.filter((s) => s.who === 'old' && s.at > tookOverAt).map((s) => s.seq);
    proxy.thaw();
    expect(oldStartsAfter).toEqual([]);
    // Back in touch, the old instance learns it was replaced and stops for good; nothing is lost.
    await pollUntil('the old instance to stop for good', async () => halted.some((e) => e instanceof FencedInstanceIdError));
    await pollUntil('every entry handled', async () => new Set(starts.map((s) => s.seq)).size === 300);
    expect(old.ownedShards()).toEqual([]);
  });
});
