import 'reflect-metadata';
import { Test, type TestingModule } from '@nestjs/testing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CoordinatorAdmin } from '@redis-stream-coordinator/nestjs';
import { CoordinatorTesting, TestRedis } from '@redis-stream-coordinator/nestjs/testing';
import { BillingHandlers, BillingModule } from './billing-app';

describe('billing', () => {
  let redis: TestRedis;
  let app: TestingModule;
  let kit: CoordinatorTesting;

  beforeAll(async () => {
    redis = await TestRedis.start(); // a private redis-server for this file, or REDIS_URL when set
    process.env.REDIS_URL = redis.url;
  });
  afterAll(() => redis.stop());

  beforeEach(async () => {
    app = await Test.createTestingModule({ imports: [BillingModule] }).compile();
    kit = CoordinatorTesting.attach(app);
    await app.init();
    await kit.ready(); // every listener joined its group and owns its shards
  });
  afterEach(async () => {
    await kit.drained(); // nothing unread, pending or running
    kit.detach();
    await app.close();
  });

  it('charges an order', async () => {
    const sent = await kit.publish('orders', { key: 'o-1', payload: { orderId: 'o-1', cents: 500 } });
    await kit.handled({ group: 'billing' }, sent);
    expect(app.get(BillingHandlers).charged).toEqual(['o-1']);
  });

  it('retries a charge that failed', async () => {
    kit.failNext({ group: 'billing' }, 2); // the payment provider is down for two attempts
    const sent = await kit.publish('orders', { key: 'o-2', payload: { orderId: 'o-2', cents: 700 } });
    const entry = await kit.handled({ group: 'billing' }, sent);
    expect(entry.attempts.map((attempt) => attempt.outcome)).toEqual(['failed', 'failed', 'succeeded']);
    expect(app.get(BillingHandlers).charged).toEqual(['o-2']);
  });

  it('dead-letters an order it can never charge', async () => {
    await kit.publish('orders', { key: 'o-3', payload: { orderId: 'o-3', cents: -1 } });
    const entry = await kit.deadLettered({ group: 'billing' }, (message) => message.key === 'o-3');
    expect(entry.attempts).toHaveLength(3);
    const [letter] = await app.get(CoordinatorAdmin).readDeadLetters('orders', 'billing');
    expect(letter).toMatchObject({ key: 'o-3', cause: 'attempts-exhausted', error: 'RangeError: order o-3: negative amount' });
  });
});
