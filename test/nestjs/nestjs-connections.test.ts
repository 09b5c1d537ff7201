import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import {
  CoordinatorConsumerProperties,
  CoordinatorModule,
  CoordinatorRegistry,
  InjectCoordinatorAdmin,
  InjectStreamPublisher,
  StreamListener,
  StreamPublisher,
} from '@redis-stream-coordinator/nestjs';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const main = useRedisServer();
const audit = useRedisServer();
const apps = closedAfterEach<TestingModule>();

async function anApp(imports: unknown[], providers: unknown[]) {
  @Module({ providers: providers as never[] })
  class FeatureModule {}
  const app = await Test.createTestingModule({ imports: [...(imports as never[]), FeatureModule] }).compile();
  apps.push(app);
  await app.init();
  return app;
}

async function activeMembers(admin: CoordinatorAdmin, streamPrefix: string, group: string) {
  const description = await admin.describeGroup(streamPrefix, group).catch(() => undefined);
  return description?.members.filter((m) => m.state === 'ACTIVE') ?? [];
}

describe('named connections', () => {
  it("members reset a connection the module created when it hangs (resetStuckConnection), an application's own client only when told", async () => {
    const prefix = uniqueName('reset-stuck');
    @Injectable()
    class Handlers {
      @StreamListener({ streamPrefix: prefix, consumerGroup: 'g', shardCount: 1 })
      onOwned() {}

      @StreamListener({ streamPrefix: prefix, consumerGroup: 'given', connection: 'given', shardCount: 1 })
      onGiven() {}

      @StreamListener({ streamPrefix: prefix, consumerGroup: 'told', connection: 'given', shardCount: 1, resetStuckConnection: true })
      onTold() {}
    }
    const app = await anApp(
      [
        CoordinatorModule.forRoot({ redis: { url: main.server.url } }),
        CoordinatorModule.forRoot({ name: 'given', redis: { client: audit.client() } }),
      ],
      [Handlers],
    );
    const byGroup = Object.fromEntries(
      app
        .get(CoordinatorRegistry)
        .entries()
        .map((r) => [r.member.options.consumerGroup, r.member.options.resetStuckConnection]),
    );
    expect(byGroup).toEqual({ g: true, given: false, told: true });
  });

  it('two roots: each listener and bean is one set of members, on the Redis of the connection it names', async () => {
    const summaries = uniqueName('summary');
    const audits = uniqueName('audit');
    const handled: string[] = [];
    @Injectable()
    class Handlers {
      @StreamListener({ streamPrefix: summaries, consumerGroup: 'summary-group', concurrency: 2, shardCount: 2 })
      onSummary(message: StreamMessage<string>) {
        handled.push(`summary ${message.payload}`);
      }

      @StreamListener({ streamPrefix: audits, consumerGroup: 'audit-group', connection: 'audit', shardCount: 2 })
      onAudit(message: StreamMessage<string>) {
        handled.push(`audit ${message.payload}`);
      }
    }
    const bean = {
      provide: 'auditBean',
      useValue: CoordinatorConsumerProperties.consumer<string>({
        streamPrefix: audits,
        consumerGroup: 'audit-bean-group',
        connection: 'audit',
        shardCount: 2,
        handler: (message) => void handled.push(`bean ${message.payload}`),
      }),
    };
    const app = await anApp(
      [
        CoordinatorModule.forRoot({ redis: { url: main.server.url }, coordinator: { heartbeatIntervalMs: 200 } }),
        CoordinatorModule.forRoot({
          name: 'audit',
          redis: { url: audit.server.url },
          coordinator: { heartbeatIntervalMs: 200, keyPrefix: 'aud' },
        }),
      ],
      [Handlers, bean],
    );
    const mainAdmin = new CoordinatorAdmin(main.client());
    const auditAdmin = new CoordinatorAdmin(audit.client(), { keyPrefix: 'aud' });
    await pollUntil(
      'every group has its members, on its own Redis',
      async () =>
        (await activeMembers(mainAdmin, summaries, 'summary-group')).length === 2 &&
        (await activeMembers(auditAdmin, audits, 'audit-group')).length === 1 &&
        (await activeMembers(auditAdmin, audits, 'audit-bean-group')).length === 1,
    );
    // Not also registered under the other root's Redis and key prefix.
    expect(await activeMembers(auditAdmin, summaries, 'summary-group')).toEqual([]);
    expect(await activeMembers(mainAdmin, audits, 'audit-group')).toEqual([]);
    expect(await activeMembers(mainAdmin, audits, 'audit-bean-group')).toEqual([]);
    const registered = app.get(CoordinatorRegistry).entries();
    expect(registered.map((r) => `${r.connection.name} ${r.source}`).sort()).toEqual([
      'audit @StreamListener on Handlers.onAudit',
      'audit bean auditBean',
      'default @StreamListener on Handlers.onSummary',
      'default @StreamListener on Handlers.onSummary',
    ]);

    await new StreamProducer(main.client(), { streamPrefix: summaries }).send({ key: 'k', payload: 's1' });
    await new StreamProducer(audit.client(), { streamPrefix: audits, keyPrefix: 'aud' }).send({ key: 'k', payload: 'a1' });
    await pollUntil('each entry handled by its own listener', async () => handled.length === 3);
    expect(handled.sort()).toEqual(['audit a1', 'bean a1', 'summary s1']);
  });

  it('a concurrency: 8 listener and a bean share one read path: 4 connections for the root, not one reader per member', async () => {
    const streamPrefix = uniqueName('conns');
    const connectionName = uniqueName('root').replace(/-/g, '_');
    const handled: string[] = [];
    @Injectable()
    class Wide {
      @StreamListener({ streamPrefix, consumerGroup: 'wide', concurrency: 8, shardCount: 8 })
      onEntry(message: StreamMessage<string>) {
        handled.push(`wide ${message.payload}`);
      }
    }
    const bean = {
      provide: 'connsBean',
      useValue: CoordinatorConsumerProperties.consumer<string>({
        streamPrefix,
        consumerGroup: 'bean',
        shardCount: 8,
        handler: (message) => void handled.push(`bean ${message.payload}`),
      }),
    };
    await anApp(
      [
        CoordinatorModule.forRoot({
          redis: { url: main.server.url, options: { connectionName } },
          coordinator: { heartbeatIntervalMs: 200 },
        }),
      ],
      [Wide, bean],
    );
    const admin = new CoordinatorAdmin(main.client());
    await pollUntil(
      'nine members',
      async () =>
        (await activeMembers(admin, streamPrefix, 'wide')).length === 8 && (await activeMembers(admin, streamPrefix, 'bean')).length === 1,
    );
    await new StreamProducer(main.client(), { streamPrefix }).sendBatch(
      Array.from({ length: 16 }, (_, i) => ({ key: `k${i}`, payload: String(i) })),
    );
    await pollUntil('each entry handled by both groups', async () => handled.length === 32);
    // The module's client, the wake-up subscriber, the doorbell and the read connection (before the
    // read hub: 2 + 9, a blocking reader per member).
    const clients = String(await main.client().client('LIST'))
      .split('\n')
      .filter((line) => line.includes(` name=${connectionName} `));
    expect(clients).toHaveLength(4);
  });

  it("a named root's StreamPublisher and CoordinatorAdmin are injected by name; the unnamed root's by class", async () => {
    const streamPrefix = uniqueName('inject');
    @Injectable()
    class Sender {
      constructor(
        readonly publisher: StreamPublisher,
        readonly admin: CoordinatorAdmin,
        @InjectStreamPublisher('audit') readonly auditPublisher: StreamPublisher,
        @InjectCoordinatorAdmin('audit') readonly auditAdmin: CoordinatorAdmin,
      ) {}
    }
    const app = await anApp(
      [
        CoordinatorModule.forRoot({ redis: { url: main.server.url } }),
        CoordinatorModule.forRoot({ name: 'audit', redis: { url: audit.server.url }, coordinator: { keyPrefix: 'aud' } }),
      ],
      [Sender],
    );
    const sender = app.get(Sender);
    await sender.auditAdmin.createStream({ streamPrefix, shardCount: 3 });
    expect((await new CoordinatorAdmin(audit.client(), { keyPrefix: 'aud' }).describeStream(streamPrefix))?.shardCount).toBe(3);
    expect(await sender.admin.describeStream(streamPrefix)).toBeNull();
    // The stream exists on the audit Redis only: its publisher writes there, the unnamed one cannot.
    await expect(sender.auditPublisher.publish(streamPrefix, { key: 'k', payload: 'audit' })).resolves.toMatchObject({
      id: expect.any(String),
    });
    await expect(sender.publisher.publish(streamPrefix, { key: 'k', payload: 'main' })).rejects.toThrow();
  });

  it('a listener naming a connection no root has fails the startup, naming the class, the method and the connection', async () => {
    @Injectable()
    class Misnamed {
      @StreamListener({ streamPrefix: uniqueName('s'), consumerGroup: 'g', connection: 'billing' })
      handle() {}
    }
    await expect(anApp([CoordinatorModule.forRoot({ redis: { url: main.server.url } })], [Misnamed])).rejects.toThrow(
      '@StreamListener on Misnamed.handle: connection "billing" is not the name of any CoordinatorModule.forRoot (connections: "default")',
    );
  });

  it('a listener without a connection, when every root is named, fails the startup', async () => {
    @Injectable()
    class Unnamed {
      @StreamListener({ streamPrefix: uniqueName('s'), consumerGroup: 'g' })
      handle() {}
    }
    await expect(anApp([CoordinatorModule.forRoot({ name: 'audit', redis: { url: main.server.url } })], [Unnamed])).rejects.toThrow(
      /@StreamListener on Unnamed.handle: it names no connection and there is no unnamed CoordinatorModule.forRoot \(connections: "audit"\)/,
    );
  });

  it('two roots with one name are refused at startup', async () => {
    await expect(
      anApp(
        [CoordinatorModule.forRoot({ redis: { url: main.server.url } }), CoordinatorModule.forRoot({ redis: { url: audit.server.url } })],
        [],
      ),
    ).rejects.toThrow(/two CoordinatorModule.forRoot imports use the connection name "default"/);
  });

  it('forRootAsync takes a name too', async () => {
    const streamPrefix = uniqueName('async');
    const app = await anApp(
      [
        CoordinatorModule.forRootAsync({
          name: 'audit',
          useFactory: () => ({
            redis: { url: audit.server.url },
            coordinator: { heartbeatIntervalMs: 200 },
            consumers: [
              CoordinatorConsumerProperties.consumer<string>({ streamPrefix, consumerGroup: 'g', shardCount: 1, handler: () => undefined }),
            ],
          }),
        }),
      ],
      [],
    );
    expect(
      app
        .get(CoordinatorRegistry)
        .entries()
        .map((r) => r.connection.name),
    ).toEqual(['audit']);
    await pollUntil(
      'the member joined',
      async () => (await activeMembers(new CoordinatorAdmin(audit.client()), streamPrefix, 'g')).length === 1,
    );
  });
});
