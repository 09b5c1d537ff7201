import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import { Injectable, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, GroupNotFoundError, type StreamMessage, StreamProducer } from '@redis-stream-coordinator/core';
import {
  CoordinatorConsumerProperties,
  CoordinatorHealthIndicator,
  CoordinatorModule,
  StreamListener,
  StreamListenerRegistry,
} from '@redis-stream-coordinator/nestjs';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();

/** Every run of every handler: who ran which entry, and when, to check overlaps and losses. */
@Injectable()
class Journal {
  readonly runs: { by: string; shard: number; id: string; seq: number; start: number; end: number }[] = [];
  active = 0;

  async record(by: string, message: StreamMessage<{ seq: number }>, work?: () => Promise<void>) {
    const start = performance.now();
    this.active += 1;
    try {
      await work?.();
    } finally {
      this.active -= 1;
    }
    this.runs.push({ by, shard: message.shardIndex, id: message.id, seq: message.payload.seq, start, end: performance.now() });
  }

  distinct() {
    return new Set(this.runs.map((r) => `${r.shard}/${r.id}`)).size;
  }

  overlaps() {
    const runs = [...this.runs].sort((a, b) => a.start - b.start);
    return runs.filter((r, i) => runs.slice(0, i).some((p) => p.shard === r.shard && p.end > r.start));
  }
}

async function anApp(providers: unknown[]) {
  @Module({ providers: [Journal, ...(providers as never[])], exports: [Journal] })
  class FeatureModule {}
  const app = await Test.createTestingModule({
    imports: [
      CoordinatorModule.forRoot({
        redis: { url: redis.server.url },
        coordinator: { heartbeatIntervalMs: 200 },
        defaults: { shutdownTimeoutMs: 2000 },
      }),
      FeatureModule,
    ],
  }).compile();
  apps.push(app);
  await app.init();
  return app;
}

async function group(streamPrefix: string, consumerGroup: string) {
  return new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, consumerGroup);
}

/** The group's ACTIVE members; none while the group does not exist yet (its first join is under way). */
async function activeMembers(streamPrefix: string, consumerGroup: string) {
  try {
    return (await group(streamPrefix, consumerGroup)).members.filter((m) => m.state === 'ACTIVE');
  } catch (error) {
    if (error instanceof GroupNotFoundError) return [];
    throw error;
  }
}

function send(streamPrefix: string, from: number, count: number) {
  return new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
    Array.from({ length: count }, (_, i) => ({ key: `k${(from + i) % 16}`, payload: { seq: from + i } })),
  );
}

describe('StreamListenerRegistry', () => {
  it('a listener by id: pause/resume keep its members and shards, stop/start leave and rejoin, setConcurrency adds and removes -mK members; nothing lost, no shard run twice at once', async () => {
    const streamPrefix = uniqueName('registry');
    @Injectable()
    class SummaryHandlers {
      constructor(private readonly journal: Journal) {}

      @StreamListener({ id: 'summaries', streamPrefix, consumerGroup: 'g', concurrency: 2, shardCount: 4 })
      onSummary(message: StreamMessage<{ seq: number }>) {
        return this.journal.record('summaries', message, () => new Promise((resolve) => setTimeout(resolve, 1)));
      }
    }
    const app = await anApp([SummaryHandlers]);
    const registry = app.get(StreamListenerRegistry);
    const journal = app.get(Journal);
    const summaries = registry.getOrThrow('summaries');
    expect(registry.ids()).toEqual(['summaries']);
    expect(summaries).toMatchObject({ id: 'summaries', kind: 'listener', concurrency: 2 });
    await pollUntil('2 members joined', async () => (await activeMembers(streamPrefix, 'g')).length === 2);
    await send(streamPrefix, 0, 40);
    await pollUntil('40 handled', async () => journal.distinct() === 40);

    summaries.pause();
    const epochs = summaries.members().map((m) => m.currentMemberEpoch());
    await send(streamPrefix, 40, 40);
    // Paused: still members with their shards; nothing is fetched. Health is up (a pause is not a problem).
    const health = await app.get(CoordinatorHealthIndicator).check();
    expect(health.coordinator.status).toBe('up');
    expect(health.coordinator.members.map((m) => m.state)).toEqual(['paused', 'paused']);
    await pollUntil('the backlog to be visible', async () => (await group(streamPrefix, 'g')).shards.reduce((n, s) => n + s.lag, 0) === 40);
    expect(journal.distinct()).toBe(40);
    expect(summaries.members().map((m) => m.ownedShards().length)).toEqual([2, 2]);
    summaries.resume();
    await pollUntil('80 handled', async () => journal.distinct() === 80);
    expect(summaries.members().map((m) => m.currentMemberEpoch())).toEqual(epochs);

    await summaries.setConcurrency(4);
    expect(summaries.concurrency).toBe(4);
    expect(summaries.members().map((m) => m.memberId.slice(-3))).toEqual(['-m0', '-m1', '-m2', '-m3']);
    await pollUntil('4 members with a shard each', async () => summaries.members().every((m) => m.ownedShards().length === 1));
    await send(streamPrefix, 80, 40);
    await summaries.setConcurrency(1);
    expect(summaries.members()).toHaveLength(1);
    await pollUntil('the one member owns all 4 shards', async () => summaries.members()[0].ownedShards().length === 4);
    await pollUntil('120 handled', async () => journal.distinct() === 120);
    expect((await app.get(CoordinatorHealthIndicator).check()).coordinator.members).toHaveLength(1);

    await summaries.stop();
    expect(summaries.isRunning()).toBe(false);
    expect(await activeMembers(streamPrefix, 'g')).toEqual([]);
    const stopped = await app.get(CoordinatorHealthIndicator).check();
    expect(stopped.coordinator).toMatchObject({ status: 'up', members: [{ listenerId: 'summaries', state: 'stopped' }] });
    await send(streamPrefix, 120, 40);
    await summaries.start();
    expect(summaries.isRunning()).toBe(true);
    await pollUntil('160 handled', async () => journal.distinct() === 160);
    expect(journal.overlaps()).toEqual([]);
    expect(journal.runs).toHaveLength(160);

    await expect(summaries.setConcurrency(0)).rejects.toThrow(/"summaries".*concurrency must be an integer from 1 to 1024, got 0/);
  });

  it('autoStartup false: registered and listed, not started, until start()', async () => {
    const streamPrefix = uniqueName('registry-later');
    @Injectable()
    class LaterHandlers {
      constructor(private readonly journal: Journal) {}

      @StreamListener({ id: 'later', autoStartup: false, streamPrefix, consumerGroup: 'g', shardCount: 2 })
      onLater(message: StreamMessage<{ seq: number }>) {
        return this.journal.record('later', message);
      }
    }
    const app = await anApp([LaterHandlers]);
    const later = app.get(StreamListenerRegistry).getOrThrow('later');
    expect(later.isRunning()).toBe(false);
    const health = await app.get(CoordinatorHealthIndicator).check();
    expect(health.coordinator).toMatchObject({ status: 'up', members: [{ listenerId: 'later', state: 'stopped', joined: false }] });
    expect(later.members()[0].isRunning()).toBe(false);
    await later.start();
    await send(streamPrefix, 0, 10);
    await pollUntil('10 handled', async () => app.get(Journal).distinct() === 10);
  });

  it('a bean consumer: setConcurrency changes its runtimeMaxConcurrency without leaving; a consumer and a listener registered at runtime', async () => {
    const streamPrefix = uniqueName('registry-bean');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const app = await anApp([
      {
        provide: 'auditConsumer',
        inject: [Journal],
        useFactory: (journal: Journal) =>
          CoordinatorConsumerProperties.consumer<{ seq: number }>({
            streamPrefix,
            consumerGroup: 'audit',
            shardCount: 4,
            runtimeMaxConcurrency: 1,
            handler: (message) => journal.record('audit', message, () => gate),
          }),
      },
    ]);
    const registry = app.get(StreamListenerRegistry);
    const journal = app.get(Journal);
    const audit = registry.getOrThrow('auditConsumer');
    expect(audit).toMatchObject({ kind: 'consumer', concurrency: 1 });
    // Owning all four shards, not only joined: the join's answer carries epoch 0 until the first
    // target is committed, which a loaded machine can delay past this line (seen in CI).
    await pollUntil('the consumer owns all four shards', async () => audit.members()[0].ownedShards().length === 4);
    const [member] = audit.members();
    const epoch = member.currentMemberEpoch();
    await send(streamPrefix, 0, 16);
    await pollUntil('one handler running', async () => journal.active === 1);
    await audit.setConcurrency(4);
    await pollUntil('four handlers running', async () => journal.active === 4);
    expect(member.currentMemberEpoch()).toBe(epoch);
    await expect(audit.setConcurrency(0)).rejects.toThrow(/auditConsumer.*runtimeMaxConcurrency/);
    release();
    await pollUntil('16 handled', async () => journal.distinct() === 16);

    // At runtime: a listener (2 members) and a consumer on another group of the same stream.
    const seen: string[] = [];
    const extra = await registry.registerListener(
      { id: 'extra', streamPrefix, consumerGroup: 'extra', concurrency: 2 },
      (message: StreamMessage) => void seen.push(`extra:${message.id}`),
    );
    const more = await registry.registerConsumer(
      CoordinatorConsumerProperties.consumer({
        id: 'more',
        streamPrefix,
        consumerGroup: 'more',
        handler: (message) => void seen.push(`more:${message.id}`),
      }),
    );
    expect(registry.ids()).toEqual(['auditConsumer', 'extra', 'more']);
    expect(extra.members()).toHaveLength(2);
    expect(more.isRunning()).toBe(true);
    await pollUntil('both groups read the 16 entries', async () => seen.length === 32);
    await expect(registry.registerListener({ id: 'extra', streamPrefix, consumerGroup: 'x' }, () => undefined)).rejects.toThrow(
      /id "extra" is already the id of listener "extra"/,
    );
  });
});

describe('the runtime control example of docs/nestjs.md', () => {
  const EXAMPLE = path.join(__dirname, '../examples/runtime-control.ts');

  it('is the example file, word for word', () => {
    const docs = fs.readFileSync(path.join(__dirname, '../../docs/nestjs.md'), 'utf8');
    const block = /<!-- example: test\/examples\/runtime-control\.ts -->\n```ts\n([\s\S]*?)```/.exec(docs);
    expect(block, 'docs/nestjs.md has the example block').not.toBeNull();
    expect(block![1]).toBe(fs.readFileSync(EXAMPLE, 'utf8'));
  });

  it('runs: the listener waits for start, is paused, resumed, scaled and stopped through its controller', async () => {
    process.env.REDIS_URL = redis.server.url;
    const { AppModule, InvoiceHandlers, ListenersController } = await import('../examples/runtime-control');
    const app = await Test.createTestingModule({ imports: [AppModule] }).compile();
    apps.push(app);
    await app.init();
    const controller = app.get(ListenersController);
    const handlers = app.get(InvoiceHandlers);
    const invoices = app.get(StreamListenerRegistry).getOrThrow('invoices');
    expect(invoices.isRunning()).toBe(false);
    const producer = new StreamProducer(redis.client(), { streamPrefix: 'invoice', shardCount: 4 });
    await producer.sendBatch([{ key: 'a', payload: { to: 'a@example.com' } }]);
    await controller.start('invoices');
    await pollUntil('the first invoice sent', async () => handlers.sent.length === 1);
    controller.pause('invoices');
    await producer.sendBatch([{ key: 'b', payload: { to: 'b@example.com' } }]);
    await pollUntil('the backlog visible while paused', async () => (await group('invoice', 'mailer')).shards.some((s) => s.lag === 1));
    expect(handlers.sent).toEqual(['a@example.com']);
    controller.resume('invoices');
    await pollUntil('the second invoice sent', async () => handlers.sent.length === 2);
    await controller.scale('invoices', '3');
    expect(invoices.members()).toHaveLength(3);
    await controller.stop('invoices');
    expect(await activeMembers('invoice', 'mailer')).toEqual([]);
  });
});
