import fs from 'node:fs';
import path from 'node:path';
import 'reflect-metadata';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder } from '@redis-stream-coordinator/core';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

// The static membership, codec and schema examples of docs/runtime.md and docs/nestjs.md.
const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();

function expectInDocs(doc: string, example: string) {
  const docs = fs.readFileSync(path.join(__dirname, '../../docs', doc), 'utf8');
  const block = new RegExp(`<!-- example: test/examples/${example.replace('.', '\\.')} -->\\n\`\`\`ts\\n([\\s\\S]*?)\`\`\``).exec(docs);
  expect(block, `docs/${doc} has the example block`).not.toBeNull();
  expect(block![1]).toBe(fs.readFileSync(path.join(__dirname, '../examples', example), 'utf8'));
}

describe('the static membership example of docs/runtime.md', () => {
  it('is the example file, word for word', () => expectInDocs('runtime.md', 'static-member.ts'));

  it('runs: msgpack orders with bytes are billed, an invalid one is dead-lettered, a restarted pod keeps its shards', async () => {
    const { billingMember, orderProducer } = await import('../examples/static-member');
    const billed: string[] = [];
    const bill = async (order: { orderId: string }) => void billed.push(order.orderId);
    const first = billingMember(redis.client(), 'pod-a', bill);
    const other = billingMember(redis.client(), 'pod-b', bill);
    await Promise.all([first.start(), other.start()]);
    await pollUntil('four shards each', async () => first.ownedShards().length === 4 && other.ownedShards().length === 4);
    const shards = first.ownedShards();
    const producer = orderProducer(redis.client());
    await producer.send({ key: 'o-1', payload: { orderId: 'o-1', amount: 5, receipt: Buffer.from([0xff, 0x00]) } });
    await producer.send({ key: 'o-2', payload: { orderId: 'o-2', amount: -1 } });
    await pollUntil('o-1 billed', async () => billed.includes('o-1'));
    const [letter] = await pollUntil('o-2 dead-lettered', async () => {
      const letters = await new CoordinatorAdmin(redis.client()).readDeadLetters('orders', 'billing');
      return letters.length > 0 && letters;
    });
    expect(letter).toMatchObject({ cause: 'invalid', key: 'o-2', codec: 'msgpack' });

    await first.stop();
    const restarted = billingMember(redis.client(), 'pod-a', bill);
    await restarted.start();
    expect(restarted.ownedShards()).toEqual(shards);
    await Promise.all([restarted.stop(), other.stop()]);
  });
});

describe('the static membership example of docs/nestjs.md', () => {
  it('is the example file, word for word', () => expectInDocs('nestjs.md', 'static-nest.ts'));

  it('runs: a listener and a bean consumer named after the pod, fed msgpack with bytes by the StreamPublisher; a call with its own codec writes JSON', async () => {
    process.env.REDIS_URL = redis.server.url;
    process.env.POD_NAME = 'pod-1';
    const { AppModule, AuditLog, ShipmentDesk, ShipmentHandlers } = await import('../examples/static-nest');
    const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
    apps.push(app);
    await app.init();
    const desk = app.get(ShipmentDesk);
    // The schema wants the label as bytes: a JSON entry ({ type: 'Buffer', data }) would be dead-lettered.
    const shipped = await desk.ship('s-1', Buffer.alloc(300, 1));
    await pollUntil('the label handled', async () => app.get(ShipmentHandlers).labels.get('s-1') === 300);
    await pollUntil('the audit saw it', async () => app.get(AuditLog).seen.length === 1);
    const keys = new KeyBuilder();
    const [[, shippedFields]] = await redis.client().xrange(keys.shardStream('shipment', shipped.shardIndex), shipped.id, shipped.id);
    expect(shippedFields.slice(2, 4)).toEqual(['c', 'msgpack']);

    const admin = new CoordinatorAdmin(redis.client());
    await admin.createStream({ streamPrefix: 'carrier-notices', shardCount: 1 });
    const notice = await desk.notifyCarrier('s-1');
    const [[, fields]] = await redis.client().xrange(keys.shardStream('carrier-notices', 0), notice.id, notice.id);
    expect(fields).toEqual(['p', '{"shipmentId":"s-1"}', 'c', 'json', 'k', 's-1']);
    const labels = (await admin.describeGroup('shipment', 'labels')).members.map((m) => m.memberId).sort();
    expect(labels).toEqual(['shipments-pod-1-m0', 'shipments-pod-1-m1']);
    expect((await admin.describeGroup('shipment', 'audit')).members.map((m) => m.memberId)).toEqual(['audit-pod-1']);
  });
});
