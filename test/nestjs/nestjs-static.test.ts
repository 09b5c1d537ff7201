import 'reflect-metadata';
import { Controller, Injectable, type INestMicroservice, type LoggerService, Module, type Type } from '@nestjs/common';
import { EventPattern } from '@nestjs/microservices';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type StreamMessage } from '@redis-stream-coordinator/core';
import { CoordinatorConsumerProperties, CoordinatorModule, StreamListener, StreamListenerRegistry } from '@redis-stream-coordinator/nestjs';
import { RedisStreamsServer } from '@redis-stream-coordinator/nestjs/microservices';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// Static membership through the Nest starter (docs/nestjs.md, Static membership, codecs and schemas): a listener's members and a bean
// consumer keep their shards when the application restarts with the same memberInstanceId.
const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();

async function anApp(streamPrefix: string, pod: string) {
  @Injectable()
  class Handlers {
    @StreamListener({ streamPrefix, consumerGroup: 'g', concurrency: 2, shardCount: 6, memberInstanceId: `listener-${pod}` })
    async onEntry(_message: StreamMessage) {}
  }
  @Module({
    providers: [
      Handlers,
      {
        provide: 'beanConsumer',
        useFactory: () =>
          CoordinatorConsumerProperties.consumer({
            streamPrefix,
            consumerGroup: 'g',
            memberInstanceId: `bean-${pod}`,
            shardCount: 6,
            handler: () => undefined,
          }),
      },
    ],
  })
  class FeatureModule {}
  return started(FeatureModule);
}

/** The feature module under the coordinator module of this file's Redis, initialised (closed after the test). */
async function started(feature: Type): Promise<TestingModule> {
  const app = await Test.createTestingModule({
    imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url }, coordinator: { heartbeatIntervalMs: 100 } }), feature],
  }).compile();
  apps.push(app);
  await app.init();
  return app;
}

async function owners(streamPrefix: string, members = 3, keyPrefix?: string) {
  const admin = new CoordinatorAdmin(redis.client(), { keyPrefix });
  return pollUntil('a STABLE group with every shard owned', async () => {
    const d = await admin.describeGroup(streamPrefix, 'g').catch(() => undefined);
    if (d?.group.state !== 'STABLE' || !d.shards.every((s) => s.state === 'OWNED')) return false;
    if (d.members.filter((m) => m.state === 'ACTIVE').length < members) return false; // every member joined
    return Object.fromEntries(
      d.members.filter((m) => m.state === 'ACTIVE').map((m) => [m.memberId, m.currentAssignment.map((s) => s.shardIndex)]),
    );
  });
}

describe('static membership in NestJS', () => {
  it('a listener with concurrency 2 has members <memberInstanceId>-m0/-m1; a restarted application takes back the same shards', async () => {
    const streamPrefix = uniqueName('nest-static');
    const first = await anApp(streamPrefix, 'pod-a');
    const before = await owners(streamPrefix);
    expect(Object.keys(before).sort()).toEqual(['bean-pod-a', 'listener-pod-a-m0', 'listener-pod-a-m1']);
    const events = async () =>
      (await new CoordinatorAdmin(redis.client()).readGroupEvents(streamPrefix, 'g', { count: 1000 })).map((e) => e.type);
    const commitsBefore = (await events()).filter((t) => t === 'TARGET_COMMITTED').length;

    await first.close(); // the members depart, keeping their shards
    apps.splice(apps.indexOf(first), 1);
    await anApp(streamPrefix, 'pod-a');
    // The departed members still own their shards: wait for the new ones to have taken them over.
    const after = await pollUntil('the three members rejoined', async () => {
      const types = await events();
      return types.filter((t) => t === 'MEMBER_STATIC_REJOINED').length === 3 && types;
    });
    expect(after.filter((t) => t === 'TARGET_COMMITTED')).toHaveLength(commitsBefore);
    expect(await owners(streamPrefix)).toEqual(before);
  }, 20_000);

  // SPEC 9.1: a shard is never left owned but unread. A static member's stop() departs (keeps its
  // shards for its next instance), which is right for a restart; but setConcurrency(n) removes the
  // highest members for good, and their shards waited, unread, for the whole session timeout.
  it('setConcurrency lowering a static listener: the removed members leave for good, their shards move at once', async () => {
    const streamPrefix = uniqueName('nest-static-scale');
    @Injectable()
    class Handlers {
      @StreamListener({
        id: 'scaled',
        streamPrefix,
        consumerGroup: 'g',
        concurrency: 2,
        shardCount: 4,
        memberInstanceId: 'pod-z',
        sessionTimeoutMs: 20_000,
      })
      async onEntry(_message: StreamMessage) {}
    }
    @Module({ providers: [Handlers] })
    class FeatureModule {}
    const app = await started(FeatureModule);
    const scaled = app.get(StreamListenerRegistry).getOrThrow('scaled');
    await pollUntil('two members with two shards each', async () => scaled.members().every((m) => m.ownedShards().length === 2));

    await scaled.setConcurrency(1);
    // Well within the 20 s session timeout: the remaining member takes the removed one's shards.
    await pollUntil('pod-z-m0 to own every shard', async () => scaled.members()[0].ownedShards().length === 4, { timeoutMs: 8000 });
    const members = (await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'g')).members;
    expect(members.find((m) => m.memberId === 'pod-z-m1')?.state).toBe('LEFT');
  }, 20_000);
});

const quiet: LoggerService = { log() {}, error() {}, debug() {}, verbose() {}, warn() {} };

/**
 * A microservice of pod `pod` on RedisStreamsServer: `orders` with its pattern's own memberInstanceId
 * and two members, `refunds` with the server's memberInstanceId.
 */
async function aMicroservice(keyPrefix: string, pod: string) {
  @Controller()
  class Handlers {
    @EventPattern('orders', { memberInstanceId: `orders-${pod}`, concurrency: 2 })
    onOrder(_order: unknown) {}

    @EventPattern('refunds')
    onRefund(_refund: unknown) {}
  }
  const server = new RedisStreamsServer({
    redis: { url: redis.server.url },
    coordinator: { keyPrefix, heartbeatIntervalMs: 100 },
    consumerGroup: 'g',
    shardCount: 6,
    memberInstanceId: `service-${pod}`,
  });
  const module = await Test.createTestingModule({ controllers: [Handlers] })
    .setLogger(quiet)
    .compile();
  const app: INestMicroservice = module.createNestMicroservice({ strategy: server, logger: quiet });
  await app.listen();
  return app;
}

describe('static membership through the microservices transport', () => {
  it("a pattern's memberInstanceId (or the server's) names its members; a restarted process takes back the same shards without a rebalance", async () => {
    const keyPrefix = uniqueName('ms-static');
    const admin = new CoordinatorAdmin(redis.client(), { keyPrefix });
    const first = await aMicroservice(keyPrefix, 'pod-a');
    let closed = false;
    try {
      // A second process of another pod shares the shards, so that a move would show.
      const other = await aMicroservice(keyPrefix, 'pod-b');
      try {
        const before = { orders: await owners('orders', 4, keyPrefix), refunds: await owners('refunds', 2, keyPrefix) };
        expect(Object.keys(before.orders).sort()).toEqual(['orders-pod-a-m0', 'orders-pod-a-m1', 'orders-pod-b-m0', 'orders-pod-b-m1']);
        expect(Object.keys(before.refunds).sort()).toEqual(['service-pod-a-m0', 'service-pod-b-m0']);
        const events = async (stream: string) => (await admin.readGroupEvents(stream, 'g', { count: 1000 })).map((e) => e.type);
        const commitsBefore = {
          orders: (await events('orders')).filter((t) => t === 'TARGET_COMMITTED').length,
          refunds: (await events('refunds')).filter((t) => t === 'TARGET_COMMITTED').length,
        };

        await first.close(); // pod-a's members depart, keeping their shards for their session
        closed = true;
        const restarted = await aMicroservice(keyPrefix, 'pod-a');
        try {
          await pollUntil("pod-a's three members rejoined", async () => {
            const rejoined = [...(await events('orders')), ...(await events('refunds'))].filter((t) => t === 'MEMBER_STATIC_REJOINED');
            return rejoined.length === 3;
          });
          expect((await events('orders')).filter((t) => t === 'TARGET_COMMITTED')).toHaveLength(commitsBefore.orders);
          expect((await events('refunds')).filter((t) => t === 'TARGET_COMMITTED')).toHaveLength(commitsBefore.refunds);
          expect({ orders: await owners('orders', 4, keyPrefix), refunds: await owners('refunds', 2, keyPrefix) }).toEqual(before);
        } finally {
          await restarted.close();
        }
      } finally {
        await other.close();
      }
    } finally {
      if (!closed) await first.close();
    }
  }, 30_000);
});
