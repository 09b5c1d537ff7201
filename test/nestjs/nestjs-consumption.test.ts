import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import { Test } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, StreamPublisher } from '@redis-stream-coordinator/nestjs';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const EXAMPLE = path.join(__dirname, '../examples/consumption.ts');

describe('the lanes, batches and manual acks example of docs/nestjs.md', () => {
  it('is the example file, word for word', () => {
    const docs = fs.readFileSync(path.join(__dirname, '../../docs/nestjs.md'), 'utf8');
    const block = /<!-- example: test\/examples\/consumption\.ts -->\n```ts\n([\s\S]*?)```/.exec(docs);
    expect(block, 'docs/nestjs.md has the example block').not.toBeNull();
    expect(block![1]).toBe(fs.readFileSync(EXAMPLE, 'utf8'));
  });

  it('runs: the lanes listener keeps each customer in order, the batch listener gets arrays, the bean consumer acks by hand', async () => {
    process.env.REDIS_URL = redis.server.url;
    const { AppModule, OrderHandlers, ReceiptMailer } = await import('../examples/consumption');
    const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
    await app.init();
    try {
      const admin = app.get(CoordinatorAdmin);
      await pollUntil('three groups STABLE', async () => {
        const groups = await Promise.all(
          ['billing', 'warehouse', 'receipts'].map((g) => admin.describeGroup('orders', g).catch(() => undefined)),
        );
        return groups.every((g) => g?.group.state === 'STABLE' && g.shards.every((s) => s.state === 'OWNED'));
      });
      const orders = Array.from({ length: 120 }, (_, i) => ({ key: `c${i % 12}`, payload: { customer: `c${i % 12}`, cents: i } }));
      // One bad row: the warehouse batch fails from it on; it ends in the dead letters, the rest are inserted.
      orders.push({ key: 'c0', payload: { customer: 'c0', cents: -1 } });
      await app.get(StreamPublisher).publishBatch('orders', orders);
      const handlers = app.get(OrderHandlers);
      const mailer = app.get(ReceiptMailer);
      await pollUntil(
        'every order charged, inserted and mailed',
        async () => handlers.charged.length === 121 && handlers.rows.length === 120 && mailer.sent.length === 121,
        { timeoutMs: 20_000 },
      );
      for (let c = 0; c < 12; c++) {
        const cents = handlers.charged.filter((line) => line.startsWith(`c${c}:`)).map((line) => Number(line.split(':')[1]));
        const expected = orders.filter((o) => o.key === `c${c}`).map((o) => o.payload.cents);
        expect(cents, `customer c${c} in order`).toEqual(expected);
      }
      await pollUntil('the bad row dead-lettered, everything acknowledged', async () => {
        const [warehouse, receipts] = await Promise.all([
          admin.describeGroup('orders', 'warehouse'),
          admin.describeGroup('orders', 'receipts'),
        ]);
        return [...warehouse.shards, ...receipts.shards].every((s) => s.pending === 0 && s.lag === 0);
      });
      expect((await admin.readDeadLetters('orders', 'warehouse')).map((d) => d.error)).toEqual([
        expect.stringContaining('negative amount'),
      ]);
    } finally {
      await app.close();
    }
  }, 30_000);
});

describe("the module's defaults reach every member", () => {
  it('defaults.runtimeMaxConcurrency gives listeners and beans their workers, unless their own runtimeMaxConcurrency or lanes says otherwise', async () => {
    const { Injectable, Module } = await import('@nestjs/common');
    const { CoordinatorConsumerProperties, CoordinatorModule, CoordinatorRegistry, StreamListener } = await import(
      '@redis-stream-coordinator/nestjs'
    );
    @Injectable()
    class Handlers {
      @StreamListener({ streamPrefix: 'workers-default', consumerGroup: 'g', concurrency: 2, autoStartup: false })
      inherited() {}
      @StreamListener({ streamPrefix: 'workers-lanes', consumerGroup: 'g', lanes: 6, autoStartup: false })
      ownLanes() {}
      @StreamListener({ streamPrefix: 'workers-own', consumerGroup: 'g', lanes: 6, runtimeMaxConcurrency: 2, autoStartup: false })
      own() {}
    }
    const bean = (streamPrefix: string, extra: object) => ({
      provide: streamPrefix,
      useValue: CoordinatorConsumerProperties.consumer({
        streamPrefix,
        consumerGroup: 'g',
        autoStartup: false,
        handler: () => undefined,
        ...extra,
      }),
    });
    @Module({
      imports: [
        CoordinatorModule.forRoot({ redis: { url: redis.server.url }, defaults: { runtimeMaxConcurrency: 3, maxAttempts: 7, lanes: 1 } }),
      ],
      providers: [Handlers, bean('workers-bean', {}), bean('workers-bean-lanes', { lanes: 5 })],
    })
    class DefaultsModule {}
    const app = await Test.createTestingModule({ imports: [DefaultsModule] }).compile();
    await app.init();
    try {
      const options = app
        .get(CoordinatorRegistry)
        .members()
        .map((m) => [m.options.streamPrefix, m.options.runtimeMaxConcurrency, m.options.lanes, m.options.maxAttempts]);
      expect(options.sort()).toEqual([
        ['workers-bean', 3, 1, 7],
        ['workers-bean-lanes', 5, 5, 7],
        ['workers-default', 3, 1, 7],
        ['workers-default', 3, 1, 7],
        ['workers-lanes', 6, 6, 7],
        ['workers-own', 2, 6, 7],
      ]);
    } finally {
      await app.close();
    }
  });

  it.each([
    [
      { batch: { maxSize: 10 } },
      'CoordinatorModule: defaults.batch cannot be a default: it changes what a handler receives (an array of messages); set it on each listener or consumer that takes batches',
    ],
    [
      { memberInstanceId: 'pod-a' },
      'CoordinatorModule: defaults.memberInstanceId cannot be a default: it names one member (every member would get the same); set it on each listener or consumer',
    ],
    [
      { coordinator: { heartbeatIntervalMs: 100 } },
      "CoordinatorModule: defaults.coordinator cannot be a default: use the module's coordinator option",
    ],
    [[1], 'CoordinatorModule: defaults must be an object of member options, got [1]'],
  ])('a default that cannot be one fails the startup, naming it: %j', async (defaults, message) => {
    const { CoordinatorModule } = await import('@redis-stream-coordinator/nestjs');
    const compiled = Test.createTestingModule({
      imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url }, defaults: defaults as never })],
    }).compile();
    await expect(compiled.then((app) => app.init())).rejects.toThrow(message);
  });
});

describe('lanes of a listener', () => {
  it("a listener's workers default to its lanes, or to the module's defaults.lanes", async () => {
    const { Injectable, Module } = await import('@nestjs/common');
    const { CoordinatorModule, CoordinatorRegistry, StreamListener } = await import('@redis-stream-coordinator/nestjs');
    @Injectable()
    class Handlers {
      @StreamListener({ id: 'own', streamPrefix: 'lanes-own', consumerGroup: 'g', lanes: 4, autoStartup: false })
      own() {}
      @StreamListener({ id: 'inherited', streamPrefix: 'lanes-inherited', consumerGroup: 'g', autoStartup: false })
      inherited() {}
    }
    @Module({ imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url }, defaults: { lanes: 8 } })], providers: [Handlers] })
    class LanesModule {}
    const app = await Test.createTestingModule({ imports: [LanesModule] }).compile();
    await app.init();
    try {
      const byPrefix = new Map(
        app
          .get(CoordinatorRegistry)
          .members()
          .map((m) => [m.options.streamPrefix, m.options]),
      );
      expect(byPrefix.get('lanes-own')).toMatchObject({ lanes: 4, runtimeMaxConcurrency: 4 });
      expect(byPrefix.get('lanes-inherited')).toMatchObject({ lanes: 8, runtimeMaxConcurrency: 8 });
    } finally {
      await app.close();
    }
  });
});
