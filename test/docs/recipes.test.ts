import 'reflect-metadata';
import type { Type } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CoordinatorAdmin } from '@redis-stream-coordinator/nestjs';
import { CoordinatorTesting, TestRedis } from '@redis-stream-coordinator/nestjs/testing';
import { quietLogger } from '../support/nest-apps';

// The recipes of docs/recipes.md, each run as its page says (test/docs/doc-examples.test.ts checks
// that each block is its file word for word). They use the testing kit of docs/testing.md.
let redis: TestRedis;
const running: { app: TestingModule; kit: CoordinatorTesting }[] = [];

beforeAll(async () => {
  redis = await TestRedis.start();
  process.env.REDIS_URL = redis.url;
});
afterAll(() => redis.stop());
afterEach(async () => {
  for (const { app, kit } of running.splice(0)) {
    kit.detach();
    await app.close();
  }
});

async function start(module: Type) {
  const app = await Test.createTestingModule({ imports: [module] })
    .setLogger(quietLogger)
    .compile();
  const kit = CoordinatorTesting.attach(app);
  running.push({ app, kit });
  await app.init();
  await kit.ready();
  return { app, kit };
}

describe('recipes', () => {
  it('retry a poison entry later: the outage dead-letters the mail, the shard goes on, the retry job sends it', async () => {
    const { InvoicesModule, Mailer, RetryLater } = await import('../examples/recipe-retry-later');
    const { app, kit } = await start(InvoicesModule);
    const mailer = app.get(Mailer);
    mailer.up = false;
    const failed = await kit.publish('invoices', { key: 'c-1', payload: { email: 'ann@example.com' } });
    await kit.deadLettered({ group: 'invoice-mails' }, failed);
    mailer.up = true;
    await kit.handled({ group: 'invoice-mails' }, await kit.publish('invoices', { key: 'c-1', payload: { email: 'bob@example.com' } }));
    expect(await app.get(RetryLater).retryMailOutages()).toEqual([]); // not five minutes old yet
    const [replay] = await app.get(RetryLater).retryMailOutages(0);
    expect(replay).toMatchObject({ status: 'replayed' });
    await kit.handled({ group: 'invoice-mails' }, replay.to!);
    await kit.drained();
    expect(mailer.sent).toEqual(['bob@example.com', 'ann@example.com']);
    expect(await app.get(CoordinatorAdmin).readDeadLetters('invoices', 'invoice-mails')).toEqual([]);
  });
  it('re-read from a point in time: the listener stops, the group moves back, every entry since is handled again', async () => {
    const { Reindex, SearchIndexer, SearchModule } = await import('../examples/recipe-reread');
    const { app, kit } = await start(SearchModule);
    const first = await kit.publish('articles', { key: 'a-1', payload: { title: 'one' } });
    await kit.handled({ group: 'search-index' }, first);
    const second = await kit.publish('articles', { key: 'a-2', payload: { title: 'two' } });
    const since = new Date(Number(second.id.split('-')[0])); // an entry id starts with Redis' time in ms
    await kit.publish('articles', { key: 'a-3', payload: { title: 'three' } });
    await kit.drained();
    await app.get(Reindex).since(since);
    await kit.ready();
    await kit.drained();
    expect(app.get(SearchIndexer).indexed.slice(0, 3)).toEqual(['one', 'two', 'three']);
    expect(app.get(SearchIndexer).indexed.slice(3).sort()).toEqual(['three', 'two']);
  });

  it('replay dead letters: list them, replay one once the cause is fixed, purge the other', async () => {
    const { ShipmentDeadLetters, Shipping, ShippingModule } = await import('../examples/recipe-replay');
    const { app, kit } = await start(ShippingModule);
    const first = await kit.publish('shipments', { key: 's-1', payload: { carrier: 'dhl' } });
    const second = await kit.publish('shipments', { key: 's-2', payload: { carrier: 'pigeon' } });
    await kit.deadLettered({ group: 'shipping' }, first);
    await kit.deadLettered({ group: 'shipping' }, second);
    const letters = app.get(ShipmentDeadLetters);
    const listed = await letters.list();
    expect(listed.map((letter) => [letter.key, letter.error])).toEqual(
      expect.arrayContaining([
        ['s-1', 'Error: unknown carrier dhl'],
        ['s-2', 'Error: unknown carrier pigeon'],
      ]),
    );
    app.get(Shipping).knownCarriers.add('dhl');
    const replayed = await letters.replay(listed.find((letter) => letter.key === 's-1')!.ref);
    await kit.handled({ group: 'shipping' }, replayed.to!);
    await letters.purge(listed.find((letter) => letter.key === 's-2')!.ref);
    expect(await letters.list()).toEqual([]);
    expect(app.get(Shipping).shipped).toEqual(['s-1 by dhl']);
  });

  it('move from @nestjs/bullmq: a processor becomes a listener, queue.add a publish; retries and failed jobs map', async () => {
    const { EmailsModule, EmailProcessor, SignupService } = await import('../examples/recipe-from-bullmq');
    const { app, kit } = await start(EmailsModule);
    const processor = app.get(EmailProcessor);
    processor.failuresLeft = 1;
    const sent = await app.get(SignupService).signedUp('ann@example.com');
    const entry = await kit.handled({ group: 'email-worker' }, sent);
    expect(entry.attempts.map((attempt) => attempt.outcome)).toEqual(['failed', 'succeeded']);
    expect(processor.sent).toEqual(['welcome ann@example.com']);
  });

  it('scale a listener: more members in this process, more shards for the group', async () => {
    const { ImagesModule, ScaleController } = await import('../examples/recipe-scale');
    const { app, kit } = await start(ImagesModule);
    const admin = app.get(CoordinatorAdmin);
    expect((await admin.describeGroup('images', 'thumbnails')).members).toHaveLength(2);
    await app.get(ScaleController).members(4);
    await kit.ready();
    expect((await admin.describeGroup('images', 'thumbnails')).members).toHaveLength(4);
    await app.get(ScaleController).shards(12);
    await kit.ready();
    const group = await admin.describeGroup('images', 'thumbnails');
    expect(group.group.shardCount).toBe(12);
    expect(new Set(group.shards.map((shard) => shard.owner)).size).toBe(4);
    await kit.handled({ group: 'thumbnails' }, await kit.publish('images', { key: 'i-1', payload: { url: 'https://example.com/1.png' } }));
  });

  it('run two apps on one Redis: each has its own key prefix, so the same names never meet', async () => {
    const { ShopModule, ShopOrders, TicketOrders, TicketsModule } = await import('../examples/recipe-two-apps');
    const shop = await start(ShopModule);
    const tickets = await start(TicketsModule);
    const sent = await shop.kit.publish('orders', { key: 'o-1', payload: { sku: 'mug' } });
    await shop.kit.handled({ group: 'billing' }, sent);
    await tickets.kit.handled({ group: 'billing' }, await tickets.kit.publish('orders', { key: 'o-1', payload: { sku: 'gig' } }));
    expect(shop.app.get(ShopOrders).seen).toEqual(['mug']);
    expect(tickets.app.get(TicketOrders).seen).toEqual(['gig']);
    expect((await shop.app.get(CoordinatorAdmin).listStreams()).length).toBe(1);
    const client = new Redis(redis.url);
    const keys = (await client.keys('*{orders*')).map((key) => key.split(':')[0]);
    client.disconnect();
    expect(new Set(keys)).toEqual(new Set(['shop', 'tickets']));
  });
});
