import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import { Controller, Inject, Injectable, type INestMicroservice, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { lastValueFrom } from 'rxjs';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, type CoordinatedMember } from '@redis-stream-coordinator/core';
import { CoordinatorHealthIndicator, CoordinatorModule } from '@redis-stream-coordinator/nestjs';
import {
  CoordinatorClientProxy,
  CoordinatorClientsModule,
  getRedisStreamsServerToken,
  getRedisStreamsTransportId,
  RedisStreamsServer,
  RedisStreamsServerModule,
} from '@redis-stream-coordinator/nestjs/microservices';
import { closedAfterEach, quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const apps = closedAfterEach<{ close(): Promise<unknown> }>();
const EXAMPLE = path.join(__dirname, '../examples/transport-module.ts');
const DOCS = path.join(__dirname, '../../docs/nestjs.md');

/** A microservice whose strategy is the server a module built: `createMicroservice` with `inject`/`useFactory`. */
async function aMicroservice(module: unknown, serverToken: unknown = RedisStreamsServer): Promise<INestMicroservice> {
  const app = await NestFactory.createMicroservice(module as never, {
    inject: [serverToken as never],
    useFactory: (strategy: RedisStreamsServer) => ({ strategy }),
    logger: quietLogger,
  });
  apps.push(app);
  await app.listen();
  return app;
}

const joined = (server: RedisStreamsServer) => server.stats().patterns.every((p) => p.members.every((m) => m.stats.joined));

describe('the transport on the module: the example of docs/nestjs.md', () => {
  it('is the example file, word for word', () => {
    const block = /<!-- example: test\/examples\/transport-module\.ts -->\n```ts\n([\s\S]*?)```/.exec(fs.readFileSync(DOCS, 'utf8'));
    expect(block, 'docs/nestjs.md has the example block').not.toBeNull();
    expect(block![1]).toBe(fs.readFileSync(EXAMPLE, 'utf8'));
  });

  it("runs: one publish reaches the server's group and a listener's second group, send() gets the reply, all on the module's connection; closing deletes the client's inbox", async () => {
    process.env.REDIS_URL = redis.server.url;
    const { bootstrap, Billing, Audit, Checkout } = await import('../examples/transport-module');
    const app = await bootstrap();
    apps.push(app);
    const server = app.get(RedisStreamsServer);
    await pollUntil('the server joined', async () => joined(server));
    await expect(app.get(Checkout).place({ id: 'o-1', customerId: 'c-7', total: 12 })).resolves.toEqual({ sku: 'o-1', price: 42 });
    await pollUntil('both groups handled the order', async () => app.get(Billing).charged.length === 1 && app.get(Audit).seen.length === 1);
    // One Redis connection for the listener, the server's members and the client: the module's.
    const { redis: serverRedis, members } = server.unwrap<{ redis: unknown; members: CoordinatedMember[] }>();
    const client = app.get<CoordinatorClientProxy>('PRICES');
    expect(client.unwrap()).toBe(serverRedis);
    // The module's defaults: the stream was created with its shardCount.
    expect((await new CoordinatorAdmin(redis.client()).describeStream('orders'))?.shardCount).toBe(8);
    expect(members.map((m) => m.options.consumerGroup)).toEqual(['billing', 'billing']);
    // The module's health indicator reports the server's members beside the listener's.
    const health = (await app.get(CoordinatorHealthIndicator).check()).coordinator;
    expect(health.status).toBe('up');
    const reported = health.members.filter((m) => m.listenerId.startsWith('transport:'));
    expect(reported.map((m) => m.memberId).sort()).toEqual(members.map((m) => m.memberId).sort());
    expect(reported.every((m) => m.joined && m.connection === 'default')).toBe(true);
    const inbox = client.inboxKey;
    expect(await redis.client().exists(inbox)).toBe(1);
    await app.close();
    expect(await redis.client().exists(inbox)).toBe(0);
  });
});

describe('the line counts of docs/nestjs.md', () => {
  it('are the lines of each app that are neither blank nor only a comment', () => {
    const docs = fs.readFileSync(DOCS, 'utf8');
    const rows = [...docs.matchAll(/^\| [^|]*\(`(test\/examples\/[\w-]+\.ts)`[^|]*\| (\d+) \|/gm)].map((m) => ({
      file: m[1],
      lines: Number(m[2]),
    }));
    expect(rows.map((row) => row.file)).toEqual([
      'test/examples/transport-module.ts',
      'test/examples/comparison-kafka.ts',
      'test/examples/comparison-bullmq.ts',
    ]);
    const count = (file: string) =>
      fs
        .readFileSync(path.join(__dirname, '../..', file), 'utf8')
        .split('\n')
        .filter((line) => line.trim() !== '' && !line.trim().startsWith('//')).length;
    for (const row of rows) expect(count(row.file), row.file).toBe(row.lines);
    expect(rows[0].lines).toBeLessThan(rows[1].lines);
  });
});

describe('a server and clients on a named connection', () => {
  it("take that connection's Redis, key prefix and defaults (server options over them, deadLetter merged); the named server runs only the patterns bound to its transport id", async () => {
    const [events, prices, other] = [uniqueName('audit-events'), uniqueName('audit-prices'), uniqueName('other')];
    const keyPrefix = uniqueName('named');
    const handled: string[] = [];
    @Controller()
    class AuditController {
      @EventPattern<string>(events, getRedisStreamsTransportId('audit'), { maxAttempts: 4 })
      onEvent(@Payload() value: string) {
        handled.push(value);
      }

      @MessagePattern(prices, getRedisStreamsTransportId('audit'))
      price(@Payload() sku: string) {
        return `${sku}:42`;
      }

      // Bound to the unnamed connection's server: not run by the audit one.
      @EventPattern<string>(other, getRedisStreamsTransportId())
      onOther() {}
    }
    @Injectable()
    class Caller {
      constructor(@Inject('AUDIT') readonly client: CoordinatorClientProxy) {}
    }
    @Module({
      imports: [
        CoordinatorModule.forRoot({
          name: 'audit',
          redis: { url: redis.server.url },
          coordinator: { keyPrefix, heartbeatIntervalMs: 200 },
          defaults: { shardCount: 3, maxAttempts: 2, deadLetter: { maxLen: 100 } },
        }),
        RedisStreamsServerModule.forRootAsync({
          connection: 'audit',
          useFactory: async () => ({ consumerGroup: 'auditors', deadLetter: { stream: 'audit-dlq' } }),
        }),
        CoordinatorClientsModule.registerAsync([{ name: 'AUDIT', connection: 'audit', useFactory: () => ({ timeoutMs: 3000 }) }]),
      ],
      controllers: [AuditController],
      providers: [Caller],
    })
    class AuditModule {}

    const app = await aMicroservice(AuditModule, getRedisStreamsServerToken('audit'));
    const server = app.get<RedisStreamsServer>(getRedisStreamsServerToken('audit'));
    expect(server.transportId).toBe(getRedisStreamsTransportId('audit'));
    expect(
      server
        .stats()
        .patterns.map((p) => p.streamPrefix)
        .sort(),
    ).toEqual([events, prices].sort());
    await pollUntil('the server joined', async () => joined(server));
    const options = Object.fromEntries(
      server.unwrap<{ members: CoordinatedMember[] }>().members.map((m) => [m.options.streamPrefix, m.options]),
    );
    expect(options[events]).toMatchObject({ maxAttempts: 4, deadLetter: { stream: 'audit-dlq', maxLen: 100 } });
    expect(options[prices]).toMatchObject({ maxAttempts: 2, consumerGroup: 'auditors' });

    const { client } = app.get(Caller);
    await lastValueFrom(client.emit(events, 'e-1'));
    await expect(lastValueFrom(client.send(prices, 'A-1'))).resolves.toBe('A-1:42');
    await pollUntil('the event handled', async () => handled.length === 1);
    // Written under the connection's key prefix, with its shardCount.
    const admin = new CoordinatorAdmin(redis.client(), { keyPrefix });
    expect((await admin.describeStream(events))?.shardCount).toBe(3);
    expect(client.inboxKey.startsWith(`${keyPrefix}:inbox:`)).toBe(true);
  });
});

describe('what a transport module needs, said at startup', () => {
  it('without the CoordinatorModule.forRoot it names, the server module and the clients module fail the start saying what to import', async () => {
    @Module({ imports: [RedisStreamsServerModule.forRoot({ consumerGroup: 'g' })] })
    class NoRoot {}
    await expect(NestFactory.createApplicationContext(NoRoot, { logger: false, abortOnError: false })).rejects.toThrow(
      'RedisStreamsServerModule: no unnamed CoordinatorModule.forRoot in the application: import CoordinatorModule.forRoot({ redis: { url } })',
    );
    @Module({
      imports: [
        CoordinatorModule.forRoot({ redis: { url: redis.server.url } }),
        CoordinatorClientsModule.register([{ name: 'BILLING', connection: 'billing' }]),
      ],
    })
    class WrongName {}
    await expect(NestFactory.createApplicationContext(WrongName, { logger: false, abortOnError: false })).rejects.toThrow(
      'CoordinatorClientsModule: client BILLING: connection "billing" is not the name of any CoordinatorModule.forRoot: import CoordinatorModule.forRoot({ name: "billing", redis: { url } })',
    );
    expect(() => CoordinatorClientsModule.register([{ name: 'A' }, { name: 'A' }])).toThrow(
      'CoordinatorClientsModule.register: two clients are named A',
    );
    expect(() => CoordinatorClientsModule.register([{} as never])).toThrow(
      'CoordinatorClientsModule.register: clients[0].name is required',
    );
  });

  it("ioredis's own keyPrefix is refused wherever it is given, naming coordinator.keyPrefix", async () => {
    const refusal = (where: string) =>
      `${where} ("app:") is not supported: ioredis would prefix some of the library's keys and not others (SCAN results, pub/sub channels); use coordinator.keyPrefix`;
    @Module({ imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url, options: { keyPrefix: 'app:' } } })] })
    class Prefixed {}
    await expect(NestFactory.createApplicationContext(Prefixed, { logger: false, abortOnError: false })).rejects.toThrow(
      refusal('redis.options.keyPrefix'),
    );
    const client = redis.client({ keyPrefix: 'app:' });
    const server = new RedisStreamsServer({ redis: { client }, consumerGroup: 'g' });
    await expect(new Promise((resolve) => server.listen(resolve))).resolves.toMatchObject({
      message: expect.stringContaining(refusal('the keyPrefix of redis.client')),
    });
  });
});
