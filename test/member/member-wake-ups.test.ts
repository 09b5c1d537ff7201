import type { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type CoordinatedMember } from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory, type TestMemberOptions } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const anyMember = memberFactory(redis);
/** A member whose handler does nothing: these tests watch ownership, not entries. */
const aMember = (options: Omit<TestMemberOptions, 'handler'>, connection?: Redis) =>
  anyMember({ handler: () => undefined, ...options }, connection);
const aProxy = proxyFactory(redis);

/**
 * A heartbeat interval of a minute (the interval a member is told is at most a third of its session
 * timeout, hence 600 s): whatever converges within seconds was woken, or polled because it knew its
 * wake-ups do not arrive.
 */
const SLOW = { sessionTimeoutMs: 600_000, coordinator: { heartbeatIntervalMs: 60_000 } };

async function balanced(streamPrefix: string, shares: Record<string, number>) {
  const admin = new CoordinatorAdmin(redis.client());
  return pollUntil(
    `a STABLE group with shares ${JSON.stringify(shares)}`,
    async () => {
      const d = await admin.describeGroup(streamPrefix, 'group');
      const owned = Object.fromEntries(d.members.filter((m) => m.state === 'ACTIVE').map((m) => [m.memberId, m.currentAssignment.length]));
      return (
        d.group.state === 'STABLE' && d.shards.every((s) => s.state === 'OWNED') && JSON.stringify(owned) === JSON.stringify(shares) && d
      );
    },
    { timeoutMs: 15_000 },
  );
}

/** Fails the test if two members ever hold one shard (owned or being revoked) when either gains one (SPEC 2.3, invariant 2). */
function watchSingleOwners(members: CoordinatedMember<KeyedPayload>[]): string[] {
  const overlaps: string[] = [];
  for (const member of members) {
    member.on('assigned', () => {
      const seen = new Map<number, string>();
      for (const m of members) {
        for (const shard of [...m.ownedShards(), ...m.stats().revokingShards]) {
          if (seen.has(shard)) overlaps.push(`shard ${shard}: ${seen.get(shard)} and ${m.memberId}`);
          seen.set(shard, m.memberId);
        }
      }
    });
  }
  return overlaps;
}

describe('wake-ups are hints: a member converges without them, slower, never wrong', () => {
  it('a SUBSCRIBE that never answers is given up after its deadline, reported, and sent again: the member is woken for the next rebalance', async () => {
    const proxy = await aProxy();
    const held = proxy.holdNextRequest(TcpProxy.command('SUBSCRIBE'));
    const streamPrefix = uniqueName('wake-subscribe');
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 4, ...SLOW }, redis.clientAt(proxy.url));
    const errors: string[] = [];
    const problems: string[][] = [];
    a.on('error', (error) => {
      errors.push(error.message);
      problems.push(a.stats().problems);
    });
    await a.start();
    await held.arrived;
    await balanced(streamPrefix, { a: 4 });
    await pollUntil('the SUBSCRIBE given up', async () =>
      errors.some((e) => e.includes('the wake-up SUBSCRIBE did not come back within 2000 ms')),
    );
    expect(problems.flat().some((p) => p.includes('the wake-up subscriber could not subscribe'))).toBe(true);
    // Sent again on the connection the deadline reset, and answered there.
    const channel = `rsc:{${streamPrefix}}:g:group:wake`;
    await pollUntil('subscribed again', async () => {
      const [, subscribers] = (await redis.client().call('PUBSUB', 'NUMSUB', channel)) as [string, number];
      return subscribers === 1;
    });
    await pollUntil('the problem gone', async () => a.stats().problems.length === 0);

    // b's join asks a to give up two shards: a is woken, a minute before its next heartbeat.
    const b = aMember({ streamPrefix, memberId: 'b', ...SLOW });
    const overlaps = watchSingleOwners([a, b]);
    await b.start();
    await balanced(streamPrefix, { a: 2, b: 2 });
    expect(overlaps).toEqual([]);
    held.release();
  });

  it('while no SUBSCRIBE is ever answered (its replies held at the proxy) the member polls at a short interval: a rebalance still takes seconds, not its minute', async () => {
    const proxy = await aProxy();
    proxy.delayRepliesMatching((reply) => reply.includes('$9\r\nsubscribe\r\n'), 600_000);
    const streamPrefix = uniqueName('wake-never');
    let beats = 0;
    const a = aMember(
      { streamPrefix, memberId: 'a', shardCount: 4, ...SLOW, coordinator: { ...SLOW.coordinator, onHeartbeat: () => void (beats += 1) } },
      redis.clientAt(proxy.url),
    );
    const problems: string[] = [];
    a.on('error', () => problems.push(...a.stats().problems));
    await a.start();
    await balanced(streamPrefix, { a: 4 });
    await pollUntil('the SUBSCRIBE given up', async () => problems.some((p) => p.includes('the wake-up subscriber could not subscribe')));
    // Not its minute, nor only when a SUBSCRIBE fails (every 2 s or more): every 500 ms at most.
    const from = beats;
    await pollUntil('six heartbeats at the short interval', async () => beats - from >= 6, { timeoutMs: 6000 });

    const b = aMember({ streamPrefix, memberId: 'b', ...SLOW });
    const overlaps = watchSingleOwners([a, b]);
    const joinedAt = Date.now();
    await b.start();
    await balanced(streamPrefix, { a: 2, b: 2 });
    // Each step of a's part (learn the revocation, report it) waits at most WAKELESS_HEARTBEAT_INTERVAL_MS.
    expect(Date.now() - joinedAt).toBeLessThan(10_000);
    expect(overlaps).toEqual([]);

    proxy.clearFaults(); // the next SUBSCRIBE is answered: the problem goes
    await pollUntil('subscribed again', async () => a.stats().problems.length === 0, { timeoutMs: 10_000 });
  }, 40_000);

  it("a late wake-up (the subscriber's messages held at the proxy): the member learns its revocation from its next heartbeat", async () => {
    const proxy = await aProxy();
    const streamPrefix = uniqueName('wake-late');
    const quick = { coordinator: { heartbeatIntervalMs: 1000 } };
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 4, ...quick }, redis.clientAt(proxy.url));
    await a.start();
    await balanced(streamPrefix, { a: 4 });
    // Every wake-up to a's process from now on arrives 30 s late (and what follows it on the connection).
    let held = 0;
    proxy.delayRepliesMatching((reply) => reply.includes('$7\r\nmessage\r\n') && (held += 1) > 0, 30_000);

    const b = aMember({ streamPrefix, memberId: 'b', ...quick });
    const overlaps = watchSingleOwners([a, b]);
    await b.start();
    await balanced(streamPrefix, { a: 2, b: 2 });
    expect(held).toBeGreaterThan(0); // the commit's wake-up for a is still at the proxy
    expect(overlaps).toEqual([]);
  });

  it('a lost wake-up (the subscriber gone half-open): found by its keep-alive, the member polls and converges', async () => {
    const proxy = await aProxy();
    const streamPrefix = uniqueName('wake-lost');
    const client = redis.clientAt(proxy.url);
    const a = aMember({ streamPrefix, memberId: 'a', shardCount: 4, ...SLOW }, client);
    const errors: string[] = [];
    a.on('error', (error) => errors.push(error.message));
    await a.start();
    await balanced(streamPrefix, { a: 4 });
    // The subscriber's next keep-alive PING (every 5 s) silences its connection for good: whatever
    // is published from then on never reaches a.
    await proxy.blackholeConnectionOf(TcpProxy.command('PING'));

    const b = aMember({ streamPrefix, memberId: 'b', ...SLOW });
    const overlaps = watchSingleOwners([a, b]);
    await b.start();
    await balanced(streamPrefix, { a: 2, b: 2 });
    expect(errors.some((e) => e.includes("the wake-up subscriber's PING did not come back within 2000 ms"))).toBe(true);
    expect(overlaps).toEqual([]);
  }, 30_000);
});
