import 'reflect-metadata';
import os from 'node:os';
import { Injectable, Module, Scope } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, type StreamMessage } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import {
  CoordinatorConsumerProperties,
  CoordinatorHealthIndicator,
  CoordinatorModule,
  StreamListener,
  StreamPublisher,
} from '@redis-stream-coordinator/nestjs';
import { closedAfterEach } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();
/** What default member names end with in this process. */
const thisProcess = `@${os.hostname().split('.')[0]}:${process.pid}`;

/** What handled which entry: the provider class, through its injected dependency. */
@Injectable()
class Journal {
  readonly entries: { by: string; seq: number }[] = [];
  record(by: string, message: StreamMessage<{ seq: number }>) {
    this.entries.push({ by, seq: message.payload.seq });
  }
}

function summaryListener(streamPrefix: string, concurrency: number, runtimeMaxConcurrency?: number) {
  @Injectable()
  class SummaryHandlers {
    constructor(readonly journal: Journal) {}

    @StreamListener({ streamPrefix, consumerGroup: 'summary-group', concurrency, runtimeMaxConcurrency, shardCount: 8 })
    async onSummary(message: StreamMessage<{ seq: number }>) {
      this.journal.record('SummaryHandlers.onSummary', message);
    }
  }
  return SummaryHandlers;
}

async function anApp(providers: unknown[], options: Record<string, unknown> = {}) {
  @Module({ providers: [Journal, ...(providers as never[])], exports: [Journal] })
  class FeatureModule {}
  const app = await Test.createTestingModule({
    imports: [
      CoordinatorModule.forRoot({ redis: { url: redis.server.url }, coordinator: { heartbeatIntervalMs: 200 }, ...options }),
      FeatureModule,
    ],
  }).compile();
  apps.push(app);
  await app.init();
  return app;
}

async function stable(streamPrefix: string, count: number) {
  return pollUntil(`${count} members, STABLE, every shard owned`, async () => {
    const d = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, 'summary-group').catch(() => undefined);
    // A join not proven yet is ACTIVE but not counted in the assignment: the group is STABLE without it.
    const active = d?.members.filter((m) => m.state === 'ACTIVE' && m.unprovenSince === null) ?? [];
    return d && active.length === count && d.group.state === 'STABLE' && d.shards.every((s) => s.state === 'OWNED') && d;
  });
}

describe('CoordinatorModule', () => {
  it('a @StreamListener with concurrency 4 and a bean consumer with runtimeMaxConcurrency 4 are exactly five members', async () => {
    const streamPrefix = uniqueName('summary');
    const bean = {
      provide: 'auditConsumer',
      inject: [Journal],
      useFactory: (journal: Journal) =>
        CoordinatorConsumerProperties.consumer<{ seq: number }>({
          streamPrefix,
          consumerGroup: 'summary-group',
          memberName: 'audit-a',
          runtimeMaxConcurrency: 4,
          handler: (m) => journal.record('auditConsumer', m),
        }),
    };
    const app = await anApp([summaryListener(streamPrefix, 4), bean]);
    const description = await stable(streamPrefix, 5);

    const listenerMembers = description.members.filter((m) => m.memberName.startsWith('SummaryHandlers.onSummary-m'));
    expect(listenerMembers.map((m) => m.memberName).sort()).toEqual(
      [0, 1, 2, 3].map((i) => `SummaryHandlers.onSummary-m${i}${thisProcess}`),
    );
    const base = listenerMembers[0].memberId.replace(/-m\d$/, '');
    expect(listenerMembers.map((m) => m.memberId).sort()).toEqual([0, 1, 2, 3].map((i) => `${base}-m${i}`));
    expect(listenerMembers.every((m) => m.runtimeMaxConcurrency === 1)).toBe(true);
    const [beanMember] = description.members.filter((m) => m.memberName === 'audit-a');
    expect(beanMember.runtimeMaxConcurrency).toBe(4);
    expect(description.members).toHaveLength(5);

    await app.get(StreamPublisher).publishBatch(
      streamPrefix,
      Array.from({ length: 200 }, (_, i) => ({ key: `k${i}`, payload: { seq: i } })),
    );
    const journal = app.get(Journal);
    await pollUntil('200 entries handled', async () => journal.entries.length === 200);
    const handlers = new Set(journal.entries.map((e) => e.by));
    expect(handlers).toEqual(new Set(['SummaryHandlers.onSummary', 'auditConsumer']));
    const health = await app.get(CoordinatorHealthIndicator).check();
    expect(health.coordinator.status).toBe('up');
    expect(health.coordinator.members).toHaveLength(5);
  });

  it('default member names say which process a member runs in: Class.method-mI@host:pid, a bean by its id; a static listener by its instance id; a given memberName as given', async () => {
    const streamPrefix = uniqueName('names');
    @Injectable()
    class Named {
      @StreamListener({ streamPrefix, consumerGroup: 'summary-group', concurrency: 2, memberName: 'mine' })
      async given() {}
      @StreamListener({ streamPrefix, consumerGroup: 'static-group', concurrency: 2, memberInstanceId: 'pod-a' })
      async pinned() {}
    }
    const bean = {
      provide: 'auditConsumer',
      useFactory: () => CoordinatorConsumerProperties.consumer({ streamPrefix, consumerGroup: 'audit-group', handler: () => undefined }),
    };
    await anApp([summaryListener(streamPrefix, 2), Named, bean], { defaults: { shardCount: 8 } });
    const names = async (group: string, count: number) => {
      const members = await pollUntil(`${count} members of ${group}`, async () => {
        const d = await new CoordinatorAdmin(redis.client()).describeGroup(streamPrefix, group).catch(() => undefined);
        return d && d.members.length === count && d.members;
      });
      return members.map((m) => m.memberName).sort();
    };
    expect(await names('summary-group', 4)).toEqual([
      `SummaryHandlers.onSummary-m0${thisProcess}`,
      `SummaryHandlers.onSummary-m1${thisProcess}`,
      'mine-m0',
      'mine-m1',
    ]);
    // A static member's name stays the same across restarts, as its shards do.
    expect(await names('static-group', 2)).toEqual(['Named.pinned-m0@pod-a', 'Named.pinned-m1@pod-a']);
    expect(await names('audit-group', 1)).toEqual([`auditConsumer${thisProcess}`]);
  });

  it('a listener can give each of its members several workers', async () => {
    const streamPrefix = uniqueName('workers');
    await anApp([summaryListener(streamPrefix, 2, 3)]);
    const description = await stable(streamPrefix, 2);
    expect(description.members.map((m) => m.runtimeMaxConcurrency)).toEqual([3, 3]);
  });

  it('two application instances share the shards sticky-balanced; closing one moves only its shards and its members leave', async () => {
    const streamPrefix = uniqueName('two-apps');
    await anApp([summaryListener(streamPrefix, 2)]);
    const second = await anApp([summaryListener(streamPrefix, 2)]);
    const before = await stable(streamPrefix, 4);
    expect(before.members.map((m) => m.currentAssignment.length)).toEqual([2, 2, 2, 2]);
    const secondIds = new Set((await second.get(CoordinatorHealthIndicator).check()).coordinator.members.map((m) => m.memberId));

    await second.close();
    apps.splice(apps.indexOf(second), 1);
    const after = await stable(streamPrefix, 2);
    for (const member of after.members.filter((m) => m.state === 'ACTIVE')) {
      const earlier = before.members.find((m) => m.memberId === member.memberId)!;
      for (const shard of earlier.currentAssignment) expect(member.currentAssignment).toContainEqual(shard);
      expect(member.currentAssignment).toHaveLength(4);
    }
    expect(after.members.filter((m) => secondIds.has(m.memberId)).map((m) => m.state)).toEqual(['LEFT', 'LEFT']);
  });
});

describe('forRootAsync', () => {
  it('takes options from a factory with injected dependencies, registers the consumers option, and leaves a given client open', async () => {
    const streamPrefix = uniqueName('async');
    const client = redis.client();
    const handled: number[] = [];
    @Module({ providers: [{ provide: 'SETTINGS', useValue: { streamPrefix } }], exports: ['SETTINGS'] })
    class SettingsModule {}
    const app = await Test.createTestingModule({
      imports: [
        CoordinatorModule.forRootAsync({
          imports: [SettingsModule],
          inject: ['SETTINGS'],
          useFactory: (settings: { streamPrefix: string }) => ({
            redis: { client },
            consumers: [
              CoordinatorConsumerProperties.consumer<{ seq: number }>({
                streamPrefix: settings.streamPrefix,
                consumerGroup: 'summary-group',
                shardCount: 2,
                handler: (m) => void handled.push(m.payload.seq),
              }),
            ],
          }),
        }),
      ],
    }).compile();
    apps.push(app);
    await app.init();
    await stable(streamPrefix, 1);
    await app.get(StreamPublisher).publish(streamPrefix, { key: 'k', payload: { seq: 7 } });
    await pollUntil('the entry handled', async () => handled.length === 1);
    await app.close();
    apps.splice(apps.indexOf(app), 1);
    expect(client.status).toBe('ready'); // the module did not create it, so it did not close it
    expect(await client.ping()).toBe('PONG');
  });
});

describe('an unreachable Redis at startup', () => {
  it('does not hang or crash the start: it logs and retries, and the members join once Redis answers', async () => {
    const server = await RedisServer.start();
    await server.kill(); // the port is known, nothing listens there yet
    const warnings: string[] = [];
    const logger = { log() {}, error() {}, debug() {}, verbose() {}, warn: (message: unknown) => void warnings.push(String(message)) };
    const streamPrefix = uniqueName('late');
    const app = await Test.createTestingModule({
      imports: [
        CoordinatorModule.forRoot({
          redis: { url: server.url },
          startRetryDelayMs: 100,
          defaults: { sessionTimeoutMs: 1500 },
          coordinator: { heartbeatIntervalMs: 200 },
        }),
        (() => {
          @Module({ providers: [Journal, summaryListener(streamPrefix, 2)] })
          class LateModule {}
          return LateModule;
        })(),
      ],
    })
      .setLogger(logger)
      .compile();
    apps.push(app);
    try {
      await app.init(); // returns although Redis is down
      await pollUntil('a warning naming the member and the retry', async () =>
        warnings.some((w) => /cannot start yet: .*; retrying every 100 ms/.test(w)),
      );
      expect((await app.get(CoordinatorHealthIndicator).check()).coordinator.status).toBe('down');
      await server.restart();
      await pollUntil('both members joined', async () => (await app.get(CoordinatorHealthIndicator).check()).coordinator.status === 'up', {
        timeoutMs: 20_000,
      });
    } finally {
      await app.close();
      apps.splice(apps.indexOf(app), 1);
      await server.stop();
    }
  });
});

describe('warnings at startup', () => {
  async function warningsOf(providers: unknown[]) {
    const warnings: string[] = [];
    const logger = { log() {}, error() {}, debug() {}, verbose() {}, warn: (message: unknown) => void warnings.push(String(message)) };
    @Module({ providers: [Journal, ...(providers as never[])] })
    class WarnedModule {}
    const app = await Test.createTestingModule({ imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url } }), WarnedModule] })
      .setLogger(logger)
      .compile();
    apps.push(app);
    await app.init();
    return { app, warnings };
  }

  it('a request-scoped provider with a @StreamListener is skipped with a warning', async () => {
    const streamPrefix = uniqueName('scoped');
    @Injectable({ scope: Scope.REQUEST })
    class PerRequest {
      @StreamListener({ streamPrefix, consumerGroup: 'summary-group', shardCount: 2 })
      handle() {}
    }
    const { app, warnings } = await warningsOf([PerRequest]);
    expect(warnings).toContainEqual(
      expect.stringMatching(/@StreamListener on PerRequest.handle is skipped: its provider is request-scoped/),
    );
    expect((await app.get(CoordinatorHealthIndicator).check()).coordinator.members).toEqual([]);
  });

  it("a transient provider's listener runs on instances with their dependencies injected, one per member", async () => {
    const streamPrefix = uniqueName('transient');
    const constructed: TransientHandlers[] = [];
    @Injectable({ scope: Scope.TRANSIENT })
    class TransientHandlers {
      constructor(readonly journal: Journal) {
        constructed.push(this);
      }

      @StreamListener({ streamPrefix, consumerGroup: 'summary-group', concurrency: 2, shardCount: 4, maxAttempts: 1 })
      handle(message: StreamMessage<{ seq: number }>) {
        this.journal.record(`TransientHandlers#${constructed.indexOf(this)}`, message);
      }
    }
    const { app, warnings } = await warningsOf([TransientHandlers]);
    expect(warnings.filter((w) => w.includes('TransientHandlers'))).toEqual([]);
    await stable(streamPrefix, 2);
    await app.get(StreamPublisher).publishBatch(
      streamPrefix,
      Array.from({ length: 40 }, (_, i) => ({ key: `k${i}`, payload: { seq: i } })),
    );
    const journal = app.get(Journal);
    await pollUntil('40 entries handled by the transient instances', async () => journal.entries.length === 40);
    // Each member resolved one instance of its own, with its dependency, and kept it.
    expect(constructed).toHaveLength(2);
    expect(constructed.every((c) => c.journal === journal)).toBe(true);
    expect(new Set(journal.entries.map((e) => e.by))).toEqual(new Set(['TransientHandlers#0', 'TransientHandlers#1']));
    expect((await redis.client().keys('*dead*')).filter((key) => key.includes(streamPrefix))).toEqual([]);
  });

  it('two listeners on one group get a warning (their members split its shards between two handlers)', async () => {
    const streamPrefix = uniqueName('twice');
    @Injectable()
    class Twice {
      @StreamListener({ streamPrefix, consumerGroup: 'summary-group', shardCount: 2 })
      first() {}

      @StreamListener({ streamPrefix, consumerGroup: 'summary-group' })
      second() {}
    }
    const { app, warnings } = await warningsOf([Twice]);
    expect(warnings).toContainEqual(expect.stringMatching(/@StreamListener on Twice.second and on Twice.first join the same group/));
    expect((await app.get(CoordinatorHealthIndicator).check()).coordinator.members).toHaveLength(2);
  });
});

describe('StreamPublisher codecs', () => {
  const upper = {
    name: 'upper-json',
    encode: (payload: unknown) => JSON.stringify(payload).toUpperCase(),
    decode: (raw: string) => JSON.parse(raw.toLowerCase()),
  };

  it("writes with the module's publisher.codec, or the one a call names (built-in by name, or a custom codec a member decodes)", async () => {
    const streamPrefix = uniqueName('publisher-codec');
    const seen: unknown[] = [];
    const bean = {
      provide: 'reader',
      useValue: CoordinatorConsumerProperties.consumer({
        streamPrefix,
        consumerGroup: 'g',
        shardCount: 1,
        codecs: [upper],
        handler: (message) => void seen.push(message.payload),
      }),
    };
    const app = await anApp([bean], { publisher: { codec: 'msgpack' } });
    const publisher = app.get(StreamPublisher);
    const written = [
      await publisher.publish(streamPrefix, { payload: { bytes: Buffer.from([1, 2]) } }),
      await publisher.publish(streamPrefix, { payload: { text: 'a' } }, { codec: 'json' }),
      ...(await publisher.publishBatch(streamPrefix, [{ payload: { text: 'b' } }], { codec: upper })),
    ];
    const raw = await redis.client().xrange(new KeyBuilder().shardStream(streamPrefix, 0), '-', '+');
    expect(raw.map(([id, fields]) => [id, fields[3]])).toEqual(written.map((w, i) => [w.id, ['msgpack', 'json', 'upper-json'][i]]));
    expect(raw[2][1][1]).toBe('{"TEXT":"B"}');
    await pollUntil('the three entries handled', async () => seen.length === 3);
    expect(seen).toEqual([{ bytes: Buffer.from([1, 2]) }, { text: 'a' }, { text: 'b' }]);
  });

  it('refuses a codec it does not know, naming the option', async () => {
    await expect(anApp([], { publisher: { codec: 'protobuf' } })).rejects.toThrow(
      `CoordinatorModule: publisher.codec must be 'json', 'msgpack' or a codec object, got "protobuf"`,
    );
    await expect(anApp([], { publisher: { codec: { name: 'no functions' } } })).rejects.toThrow(
      'CoordinatorModule: publisher.codec must have a name and encode(payload) and decode(raw) functions',
    );
    const publisher = (await anApp([])).get(StreamPublisher);
    await expect(publisher.publish('s', { payload: 1 }, { codec: 'xml' as never })).rejects.toThrow(
      `StreamPublisher: codec must be 'json', 'msgpack' or a codec object, got "xml"`,
    );
  });
});

describe('bad configuration fails at startup, naming the option', () => {
  it('no Redis options', async () => {
    await expect(anApp([], { redis: undefined })).rejects.toThrow(/the "redis" option is required/);
  });

  it.each([
    [0, /concurrency must be an integer from 1 to 1024, got 0/],
    [1.5, /concurrency must be an integer from 1 to 1024, got 1.5/],
  ])('concurrency %s', async (concurrency, message) => {
    await expect(anApp([summaryListener(uniqueName('bad'), concurrency)])).rejects.toThrow(message);
  });

  it('a missing streamPrefix', async () => {
    @Injectable()
    class NoPrefix {
      @StreamListener({ consumerGroup: 'g' } as never)
      handle() {}
    }
    await expect(anApp([NoPrefix])).rejects.toThrow(/@StreamListener on NoPrefix.handle: streamPrefix undefined is invalid/);
  });

  it('a bean consumer with a bad option', async () => {
    const bean = {
      provide: 'bad',
      useValue: CoordinatorConsumerProperties.consumer({
        streamPrefix: 's',
        consumerGroup: 'g',
        runtimeMaxConcurrency: 0,
        handler: () => undefined,
      }),
    };
    await expect(anApp([bean])).rejects.toThrow(/bean bad: runtimeMaxConcurrency must be an integer from 1 to 10000, got 0/);
  });

  it("a bad module default is named as the module's, on the listener it reached; a listener's own value is the listener's", async () => {
    await expect(anApp([summaryListener(uniqueName('defaults'), 1)], { defaults: { sessionTimeoutMs: 5 } })).rejects.toThrow(
      '@StreamListener on SummaryHandlers.onSummary: sessionTimeoutMs must be an integer from 100 to 86400000, got 5 (from CoordinatorModule defaults.sessionTimeoutMs)',
    );
    await expect(anApp([summaryListener(uniqueName('defaults'), 1, 0)], { defaults: { runtimeMaxConcurrency: 2 } })).rejects.toThrow(
      /@StreamListener on SummaryHandlers.onSummary: runtimeMaxConcurrency must be an integer from 1 to 10000, got 0$/,
    );
  });
});
