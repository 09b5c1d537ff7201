import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type StreamMessage } from '@redis-stream-coordinator/core';
import {
  CoordinatorConsumerProperties,
  CoordinatorModule,
  CoordinatorRegistry,
  InjectCoordinatorAdmin,
  InjectStreamPublisher,
  StreamListener,
  StreamPublisher,
} from '@redis-stream-coordinator/nestjs';
import { pollUntil } from './support/poll';
import { uniqueName, useRedisServer } from './support/vitest-redis';

const main = useRedisServer();
const audit = useRedisServer();
const apps: TestingModule[] = [];

afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close().catch(() => undefined)));
});

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
    @Injectable()
    class Sender {
      constructor(
        readonly publisher: StreamPublisher,
        @InjectStreamPublisher('audit') readonly auditPublisher: StreamPublisher,
        @InjectCoordinatorAdmin('audit') readonly auditAdmin: CoordinatorAdmin,
      ) {}
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
        CoordinatorModule.forRoot({ name: 'audit', redis: { url: audit.server.url }, coordinator: { heartbeatIntervalMs: 200, keyPrefix: 'aud' } }),
      ],
      [Handlers, Sender, bean],
    );

    // Two members for the summary listener, one for the audit listener, one for the bean: never one set per root.
    const registered = app.get(CoordinatorRegistry).entries();
    expect(registered.map((r) => `${r.connection.name} ${r.source}`).sort()).toEqual([
      'audit @StreamListener on Handlers.onAudit',
      'audit bean auditBean',
      'default @StreamListener on Handlers.onSummary',
      'default @StreamListener on Handlers.onSummary',
    ]);
    const mainAdmin = app.get(CoordinatorAdmin);
    const { auditAdmin, auditPublisher, publisher } = app.get(Sender);
    await pollUntil('every group has its members, on its own Redis', async () =>
      (await activeMembers(mainAdmin, summaries, 'summary-group')).length === 2 &&
      (await activeMembers(auditAdmin, audits, 'audit-group')).length === 1 &&
      (await activeMembers(auditAdmin, audits, 'audit-bean-group')).length === 1,
    );
    expect(await activeMembers(new CoordinatorAdmin(audit.client(), { keyPrefix: 'aud' }), summaries, 'summary-group')).toEqual([]);
    expect(await activeMembers(new CoordinatorAdmin(main.client()), audits, 'audit-group')).toEqual([]);

    await publisher.publish(summaries, { key: 'k', payload: 's1' });
    await auditPublisher.publish(audits, { key: 'k', payload: 'a1' });
    await pollUntil('each entry handled by its own listener', async () => handled.length === 3);
    expect(handled.sort()).toEqual(['audit a1', 'bean a1', 'summary s1']);
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
        [
          CoordinatorModule.forRoot({ redis: { url: main.server.url } }),
          CoordinatorModule.forRoot({ redis: { url: audit.server.url } }),
        ],
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
    expect(app.get(CoordinatorRegistry).entries().map((r) => r.connection.name)).toEqual(['audit']);
    await pollUntil('the member joined', async () => (await activeMembers(new CoordinatorAdmin(audit.client()), streamPrefix, 'g')).length === 1);
  });
});
