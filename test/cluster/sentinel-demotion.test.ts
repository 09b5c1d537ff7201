import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import type { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  KeyBuilder,
  type StreamMessage,
  StreamProducer,
  reconnectOnReadonly,
} from '@redis-stream-coordinator/core';
import { CoordinatorModule, CoordinatorRegistry, StreamListener } from '@redis-stream-coordinator/nestjs';
import { HandlerRecorder, type KeyedPayload, keyedMessages } from '../support/handler-recorder';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { useRedisSentinel } from '../support/vitest-cluster';

// A master moved while the old one stays up (REPLICAOF, as an operator or a managed service does
// it, or as a test harness makes a returning master a replica): Redis 7 keeps the old master's
// clients connected, and every write on them is refused READONLY until they reconnect. Reported
// from flaky runs of the Sentinel failover test (cluster.test.ts): heartbeats refused READONLY.
const sentinel = useRedisSentinel();
const apps = closedAfterEach<TestingModule>();
const keys = new KeyBuilder();

const started: CoordinatedMember<KeyedPayload>[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
});

// What recovery may take once the master moved: the next heartbeat (200 ms here) is refused, the
// client reconnects (ioredis' first retry within 250 ms) and asks the Sentinels, the heartbeat
// after a failure goes within a second, the blocked reader (closed by Redis on REPLICAOF)
// reconnects by itself; plus what a loaded 2-core machine adds (three test files at a time).
const RECOVERY_MS = 250 + 1000 + 200 + 5000;

function aMember(client: Redis, streamPrefix: string, recorder: HandlerRecorder, resetStuckConnection = false) {
  const member = new CoordinatedMember<KeyedPayload>(client, {
    streamPrefix,
    consumerGroup: 'group',
    coordinator: { heartbeatIntervalMs: 200 },
    sessionTimeoutMs: 10_000,
    handler: recorder.handler('m'),
    resetStuckConnection,
  });
  member.on('error', () => undefined);
  started.push(member);
  return member;
}

/**
 * Waits until the 8 entries sent (to 2 shards) are handled, none is pending (read, not acknowledged) on the master
 * of now, and the member lists no problem: recovered means that acknowledgements and heartbeats get
 * through again (handlers alone also run without: the blocked reader is closed by REPLICAOF and
 * reconnects by itself).
 */
async function recovered(streamPrefix: string, group: string, member: { stats(): { problems: string[] } }, handled: () => number) {
  let last: unknown;
  await pollUntil(
    'the entries sent after the switch handled and acknowledged, a heartbeat accepted',
    async () => {
      const redis = sentinel.client();
      try {
        const pending = await Promise.all([0, 1].map((s) => redis.xpending(keys.shardStream(streamPrefix, s), group) as Promise<[number]>));
        last = { pending: pending.map(([count]) => count), problems: member.stats().problems };
        return handled() === 8 && pending.every(([count]) => count === 0) && member.stats().problems.length === 0;
      } finally {
        redis.disconnect();
      }
    },
    { timeoutMs: RECOVERY_MS, intervalMs: 100 },
  ).catch((error: Error) => {
    throw new Error(`${error.message}: ${handled()} of 8 handled; ${JSON.stringify(last)}`);
  });
}

/** Sends 4 entries (2 keys) through a client made now, so connected to the master of now. */
async function send(streamPrefix: string, label: string) {
  await new StreamProducer(sentinel.client(), { streamPrefix }).sendBatch(keyedMessages(2, 2, label));
}

/**
 * A member on `client` handles entries, the master is moved under it (switchMaster), and it must
 * recover (`recovered`). Returns the messages of the member's error events.
 */
async function movedUnder(client: Redis, resetStuckConnection = false): Promise<string[]> {
  const streamPrefix = uniqueName('demoted');
  const recorder = new HandlerRecorder();
  await new CoordinatorAdmin(sentinel.client()).createStream({ streamPrefix, shardCount: 2 });
  const member = aMember(client, streamPrefix, recorder, resetStuckConnection);
  const errors: string[] = [];
  member.on('error', (e: Error) => errors.push(e.message));
  await member.start();
  await send(streamPrefix, 'before');
  await pollUntil('the first entries handled', async () => recorder.distinctEntries() === 4);

  await sentinel.setup.switchMaster();
  await send(streamPrefix, 'after');
  await recovered(streamPrefix, 'group', member, () => recorder.distinctEntries());
  return errors;
}

describe('a master moved under a connection (it stays on the old master, now a replica)', () => {
  it('a member whose client reconnects on READONLY (reconnectOnReadonly) goes on on the new master', async () => {
    // Without reconnectOnError every heartbeat and acknowledgement on the old master is refused
    // READONLY for as long as the connection lives.
    await movedUnder(sentinel.client({ reconnectOnError: reconnectOnReadonly }));
  }, 60_000);

  it('a member on a client without reconnectOnError names READONLY and the option to set in stats().problems', async () => {
    const streamPrefix = uniqueName('demoted-bare');
    const recorder = new HandlerRecorder();
    await new CoordinatorAdmin(sentinel.client()).createStream({ streamPrefix, shardCount: 1 });
    const member = aMember(sentinel.client({ reconnectOnError: null }), streamPrefix, recorder);
    await member.start();
    await sentinel.setup.switchMaster();
    const problem = await pollUntil('the problem listed', async () => member.stats().problems.find((p) => /READONLY/.test(p)), {
      timeoutMs: RECOVERY_MS,
    });
    expect(problem).toMatch(/command connection is on a read-only replica \(READONLY .*reconnectOnError: reconnectOnReadonly/);
  }, 60_000);

  it('a member told to reset its stuck connection (resetStuckConnection) resets one that Redis answers READONLY, and goes on', async () => {
    const errors = await movedUnder(sentinel.client({ reconnectOnError: null }), true);
    expect(errors.find((e) => /refused READONLY/.test(e))).toMatch(
      /a heartbeat was refused READONLY \(the command connection is on a replica\); the command connection was reset/,
    );
  }, 60_000);

  it('a NestJS module connecting through the Sentinels itself (redis.options) goes on on the new master', async () => {
    const streamPrefix = uniqueName('demoted-nest');
    const handled = new Set<string>();
    @Injectable()
    class Handlers {
      @StreamListener({ streamPrefix, consumerGroup: 'g', shardCount: 2, sessionTimeoutMs: 10_000 })
      onEntry(message: StreamMessage<KeyedPayload>) {
        handled.add(`${message.key}/${message.payload.seq}`);
      }
    }
    @Module({ providers: [Handlers] })
    class FeatureModule {}
    const options = { sentinels: sentinel.setup.sentinelNodes, name: sentinel.setup.masterName, sentinelRetryStrategy: () => 100 };
    const app = await Test.createTestingModule({
      imports: [CoordinatorModule.forRoot({ redis: { options }, coordinator: { heartbeatIntervalMs: 200 } }), FeatureModule],
    }).compile();
    apps.push(app);
    await app.init();
    await send(streamPrefix, 'before');
    await pollUntil('the first entries handled', async () => handled.size === 4);

    await sentinel.setup.switchMaster();
    await send(streamPrefix, 'after');
    const [{ member }] = app.get(CoordinatorRegistry).entries();
    await recovered(streamPrefix, 'g', member, () => handled.size);
  }, 60_000);
});
