import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type CoordinatedMember, StreamProducer } from '@redis-stream-coordinator/core';
import { pollUntil } from '../support/poll';
import { useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const EXAMPLE = path.join(__dirname, '../examples/consumption-core.ts');
let members: CoordinatedMember<unknown>[] = [];
afterEach(async () => {
  await Promise.all(members.splice(0).map((m) => m.stop()));
});

describe('the lanes, batches and manual acks example of docs/runtime.md', () => {
  it('is the example file, word for word', () => {
    const docs = fs.readFileSync(path.join(__dirname, '../../docs/runtime.md'), 'utf8');
    const block = /<!-- example: test\/examples\/consumption-core\.ts -->\n```ts\n([\s\S]*?)```/.exec(docs);
    expect(block, 'docs/runtime.md has the example block').not.toBeNull();
    expect(block![1]).toBe(fs.readFileSync(EXAMPLE, 'utf8'));
  });

  it('runs: lanes keep each customer in order, batches insert all but the bad row, manual acks settle every entry', async () => {
    const { startOrderMembers } = await import('../examples/consumption-core');
    const out = { charged: [] as string[], rows: [] as number[], mailed: [] as string[] };
    members = (await startOrderMembers(redis.client(), out)) as CoordinatedMember<unknown>[];
    const orders = Array.from({ length: 120 }, (_, i) => ({ key: `c${i % 12}`, payload: { customer: `c${i % 12}`, cents: i } }));
    orders.push({ key: 'c0', payload: { customer: 'c0', cents: -1 } });
    await new StreamProducer(redis.client(), { streamPrefix: 'orders' }).sendBatch(orders);
    await pollUntil(
      'every order charged, inserted and mailed',
      async () => out.charged.length === 121 && out.rows.length === 120 && out.mailed.length === 121,
      { timeoutMs: 20_000 },
    );
    for (let c = 0; c < 12; c++) {
      const cents = out.charged.filter((line) => line.startsWith(`c${c}:`)).map((line) => Number(line.split(':')[1]));
      expect(cents, `customer c${c} in order`).toEqual(orders.filter((o) => o.key === `c${c}`).map((o) => o.payload.cents));
    }
    const admin = new CoordinatorAdmin(redis.client());
    await pollUntil('everything acknowledged', async () => {
      const groups = await Promise.all(['billing', 'warehouse', 'receipts'].map((g) => admin.describeGroup('orders', g)));
      return groups.every((g) => g.shards.every((s) => s.pending === 0 && s.lag === 0));
    });
    expect((await admin.readDeadLetters('orders', 'warehouse')).map((d) => d.error)).toEqual([expect.stringContaining('negative amount')]);
  }, 30_000);
});
