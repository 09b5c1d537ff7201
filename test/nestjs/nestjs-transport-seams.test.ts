import 'reflect-metadata';
import { Controller, type INestMicroservice } from '@nestjs/common';
import { MessagePattern, Payload } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { lastValueFrom } from 'rxjs';
import { afterEach, describe, expect, it } from 'vitest';
import { CoordinatedMember, CoordinatorAdmin, KeyBuilder } from '@redis-stream-coordinator/core';
import { CoordinatorClientProxy, RedisStreamsServer, RequestTimeoutError } from '@redis-stream-coordinator/nestjs/microservices';
import { quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { proxyFactory } from '../support/proxy-fixture';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const aProxy = proxyFactory(redis);
const cleanups: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

/** A Nest microservice with RedisStreamsServer over the private Redis (direct), its members joined. */
async function aMicroservice(controllers: unknown[], keyPrefix: string) {
  const server = new RedisStreamsServer({
    redis: { url: redis.server.url },
    coordinator: { keyPrefix, heartbeatIntervalMs: 200 },
    consumerGroup: 'service',
    maxAttempts: 2,
    retryBackoffMs: 10,
    shardCount: 1,
  });
  const module = await Test.createTestingModule({ controllers: controllers as never[] })
    .setLogger(quietLogger)
    .compile();
  const app: INestMicroservice = module.createNestMicroservice({ strategy: server, logger: quietLogger });
  cleanups.push(() => app.close());
  await app.listen();
  await pollUntil('members joined', async () => server.stats().patterns.every((p) => p.members.every((m) => m.stats.joined)));
  return server;
}

describe('SPEC 10.1: the client reads its reply inbox with a deadline', () => {
  it('an inbox read that never comes back (a half-open reader connection) is abandoned, its connection reset, and replies arrive again', async () => {
    const echo = uniqueName('echo');

    @Controller()
    class EchoController {
      @MessagePattern(echo)
      echo(@Payload() value: string) {
        return value;
      }
    }

    const keyPrefix = uniqueName('seams');
    await aMicroservice([EchoController], keyPrefix);
    const proxy = await aProxy();
    const client = new CoordinatorClientProxy({ redis: { url: proxy.url }, keyPrefix, timeoutMs: 10_000 });
    cleanups.push(() => client.close());
    await expect(lastValueFrom(client.send(echo, 'first'))).resolves.toBe('first');
    // The reader's next XREAD stops at the proxy and is never answered, its connection left open:
    // what a half-open connection does. The command connection goes on working.
    const held = proxy.holdNextRequest(TcpProxy.command('XREAD'));
    cleanups.push(async () => held.release());
    await held.arrived;
    const started = Date.now();
    await expect(lastValueFrom(client.send(echo, 'second'))).resolves.toBe('second');
    // Within the read's block time, its grace and the retry delay; nowhere near timeoutMs.
    expect(Date.now() - started).toBeLessThan(6000);
    expect(client.stats()).toMatchObject({ inboxReadTimeouts: 1, timedOut: 0, pendingRequests: 0 });
  }, 20_000);
});

describe('SPEC 10.1: close() is bounded', () => {
  it('close() returns within its bound when every connection of the client stops answering without closing', async () => {
    const echo = uniqueName('echo');

    @Controller()
    class EchoController {
      @MessagePattern(echo)
      echo(@Payload() value: string) {
        return value;
      }
    }

    const keyPrefix = uniqueName('seams');
    await aMicroservice([EchoController], keyPrefix);
    const proxy = await aProxy();
    const client = new CoordinatorClientProxy({ redis: { url: proxy.url }, keyPrefix });
    cleanups.push(() => client.close());
    await expect(lastValueFrom(client.send(echo, 'first'))).resolves.toBe('first');
    proxy.blackholeOpenConnections();
    const started = Date.now();
    const outcome = await Promise.race([
      client.close().then(() => 'closed'),
      new Promise<string>((resolve) => setTimeout(() => resolve('still closing'), 8000)),
    ]);
    expect(outcome).toBe('closed');
    // The inbox's DEL (2 s) and the connection's QUIT (2 s), each bounded.
    expect(Date.now() - started).toBeLessThan(6000);
    // Not deleted: its TTL removes it.
    expect(await redis.client().pttl(client.inboxKey)).toBeGreaterThan(0);
  }, 20_000);
});

describe('a replayed request is handled as an event (SPEC 10.4: a header copied by a replay names no requester)', () => {
  it('a dead-lettered request replayed after its requester gave up runs its @MessagePattern handler, and no reply is written', async () => {
    const prices = uniqueName('prices');
    const keyPrefix = uniqueName('seams');
    // A member of the group that fails every entry dead-letters the request first.
    const failing = new CoordinatedMember(redis.client(), {
      streamPrefix: prices,
      consumerGroup: 'service',
      shardCount: 1,
      maxAttempts: 1,
      coordinator: { keyPrefix, heartbeatIntervalMs: 200 },
      handler: () => {
        throw new Error('down');
      },
    });
    failing.on('error', () => undefined);
    cleanups.push(() => failing.stop());
    await failing.start();
    const client = new CoordinatorClientProxy({ redis: { url: redis.server.url }, keyPrefix, timeoutMs: 300 });
    cleanups.push(() => client.close());
    await expect(lastValueFrom(client.send(prices, { sku: 'A-1' }))).rejects.toBeInstanceOf(RequestTimeoutError);
    const admin = new CoordinatorAdmin(redis.client(), { keyPrefix });
    await pollUntil('dead-lettered', async () => (await admin.readDeadLetters(prices, 'service')).length === 1);
    await failing.stop();

    const handled: unknown[] = [];

    @Controller()
    class PricesController {
      @MessagePattern(prices)
      price(@Payload() query: { sku: string }) {
        handled.push(query);
        return 42;
      }
    }

    const server = await aMicroservice([PricesController], keyPrefix);
    const [letter] = await admin.readDeadLetters(prices, 'service');
    expect(await admin.replayDeadLetter(prices, 'service', letter.ref)).toMatchObject({ status: 'replayed' });
    await pollUntil('the replayed request handled', async () => handled.length === 1).catch((error: Error) => {
      throw new Error(`${error.message}: server ${JSON.stringify(server.stats())}`);
    });
    expect(handled).toEqual([{ sku: 'A-1' }]);
    expect(server.stats()).toMatchObject({ expiredRequests: 0, refusedRequests: 0, droppedReplies: 0 });
    // Nobody waits for a replayed request's answer: once the entry is acknowledged (a reply would
    // have been written before), the requester's inbox holds no reply.
    const shard = new KeyBuilder(keyPrefix).shardStream(prices, 0);
    await pollUntil('the replayed entry acknowledged', async () => Number((await redis.client().xpending(shard, 'service'))[0]) === 0);
    const inbox = await redis.client().xrange(client.inboxKey, '-', '+');
    expect(inbox.filter(([, fields]) => fields[1] !== '')).toEqual([]);
  }, 30_000);
});
