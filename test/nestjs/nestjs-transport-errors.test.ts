import 'reflect-metadata';
import { BadRequestException, Controller, type INestMicroservice } from '@nestjs/common';
import {
  type ClientProxy,
  ClientProxyFactory,
  Ctx,
  EventPattern,
  MessagePattern,
  Payload,
  RpcException,
  Transport,
} from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { lastValueFrom } from 'rxjs';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder } from '@redis-stream-coordinator/core';
import { type RedisStreamsContext, StreamRecord } from '@redis-stream-coordinator/nestjs/microservices';
import { quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { useTransportApps } from '../support/transport-apps';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const { aMicroservice, aClient, deadLettersOf, cleanups } = useTransportApps(redis);

describe('RedisStreamsContext ids', () => {
  it("ctx.getId() is unique across the stream's shards (<shardIndex>/<entryId>); getEntryId() is the entry's id in its shard", async () => {
    const orders = uniqueName('orders');
    const seen: { id: string; entryId: string; shard: number; payload: string }[] = [];
    @Controller()
    class OrdersController {
      @EventPattern<string>(orders)
      on(@Payload() payload: string, @Ctx() context: RedisStreamsContext) {
        seen.push({ id: context.getId(), entryId: context.getEntryId(), shard: context.getShardIndex(), payload });
      }
    }
    const { keyPrefix } = await aMicroservice([OrdersController], { shardCount: 2 });
    const client = aClient(keyPrefix);
    // Entry ids are per shard stream: the same id in two shards is two entries. Write one to shard 0,
    // then a copy of its fields under the very same id to shard 1 (empty, so the id is allowed).
    const written = await lastValueFrom(client.emit(orders, new StreamRecord('first', { shardIndex: 0 })));
    const keys = new KeyBuilder(keyPrefix);
    const probe = redis.client();
    const [[, fields]] = await probe.xrange(keys.shardStream(orders, 0), written.id, written.id);
    await probe.xadd(keys.shardStream(orders, 1), written.id, ...fields);
    await pollUntil('both entries handled', async () => seen.length === 2);
    expect(seen.map((s) => s.entryId)).toEqual([written.id, written.id]);
    expect(new Set(seen.map((s) => s.id)).size).toBe(2);
    for (const s of seen) expect(s.id).toBe(`${s.shard}/${s.entryId}`);
  });
});

describe("a handler's exception, kept", () => {
  it('an @EventPattern handler that throws: the dead letter keeps the exception as thrown (name, message, stack), not the RPC filter\'s "Internal server error"', async () => {
    const orders = uniqueName('orders');
    @Controller()
    class OrdersController {
      @EventPattern<string>(orders)
      on(@Payload() order: { id: string }) {
        throw new TypeError(`order ${order.id} has no customer`);
      }
    }
    const { server, keyPrefix } = await aMicroservice([OrdersController], { shardCount: 1 });
    const deadLetters = deadLettersOf(server);
    await lastValueFrom(aClient(keyPrefix).emit(orders, { id: 'o-1' }));
    await pollUntil('dead-lettered', async () => deadLetters.length === 1);
    expect(deadLetters[0]).toMatchObject({ reason: 'TypeError: order o-1 has no customer', attempts: 2, cause: 'attempts-exhausted' });
    const [letter] = await new CoordinatorAdmin(redis.client(), { keyPrefix }).readDeadLetters(orders, 'service');
    expect(letter.error).toBe('TypeError: order o-1 has no customer');
    expect(letter.stack).toMatch(/^TypeError: order o-1 has no customer\n\s+at OrdersController\.on /);
    expect(letter.stack).toContain('nestjs-transport-errors.test.ts');
  });

  it('deadLetter.includeStack: false leaves the stack out; nonRetryableErrors matches the class the handler (or a pipe, a guard) threw', async () => {
    const orders = uniqueName('orders');
    @Controller()
    class OrdersController {
      @EventPattern<string>(orders)
      on(@Payload() order: { id: string }) {
        throw new BadRequestException(`order ${order.id} is malformed`);
      }
    }
    const { server, keyPrefix } = await aMicroservice([OrdersController], {
      shardCount: 1,
      maxAttempts: 5,
      deadLetter: { includeStack: false, nonRetryableErrors: [BadRequestException] },
    });
    const deadLetters = deadLettersOf(server);
    await lastValueFrom(aClient(keyPrefix).emit(orders, { id: 'o-2' }));
    await pollUntil('dead-lettered', async () => deadLetters.length === 1);
    expect(deadLetters[0]).toMatchObject({ reason: 'BadRequestException: order o-2 is malformed', attempts: 1, cause: 'non-retryable' });
    const [letter] = await new CoordinatorAdmin(redis.client(), { keyPrefix }).readDeadLetters(orders, 'service');
    expect(letter.stack).toBeUndefined();
  });
});

/** What a thrower throws, by name: the same set on both transports. */
const THROWN: Record<string, () => never> = {
  error: () => {
    throw new Error('boom');
  },
  'rpc-string': () => {
    throw new RpcException('no such sku');
  },
  'rpc-object': () => {
    throw new RpcException({ code: 'NOT_FOUND', sku: 'A-1' });
  },
  'http-exception': () => {
    throw new BadRequestException('bad sku');
  },
  string: () => {
    throw 'plain string';
  },
};

/** The error send() fails with for each exception, or `resolved` if it does not fail. */
async function errorsOf(client: ClientProxy, pattern: string): Promise<Record<string, unknown>> {
  const outcomes: Record<string, unknown> = {};
  for (const name of Object.keys(THROWN)) {
    outcomes[name] = await lastValueFrom(client.send(pattern, name)).then(
      () => 'resolved',
      (error: unknown) => error,
    );
  }
  return outcomes;
}

describe("send(): a handler's exception reaches the requester as it does on Nest's own transports", () => {
  it("for an Error, an RpcException with a string or an object, an HttpException and a thrown string, send() fails with what Nest's Redis transport gives", async () => {
    const pattern = uniqueName('thrower');
    @Controller()
    class Thrower {
      @MessagePattern(pattern)
      throw(@Payload() name: string) {
        THROWN[name]();
      }
    }

    // Nest's own Redis transport (pub/sub) on the same redis-server.
    const nestModule = await Test.createTestingModule({ controllers: [Thrower] })
      .setLogger(quietLogger)
      .compile();
    const nestApp: INestMicroservice = nestModule.createNestMicroservice({
      transport: Transport.REDIS,
      options: { host: '127.0.0.1', port: redis.server.port },
      logger: quietLogger,
    });
    cleanups.push(() => nestApp.close());
    await nestApp.listen();
    const nestClient = ClientProxyFactory.create({ transport: Transport.REDIS, options: { host: '127.0.0.1', port: redis.server.port } });
    cleanups.push(() => nestClient.close());
    const theirs = await errorsOf(nestClient, pattern);

    const { keyPrefix } = await aMicroservice([Thrower]);
    const ours = await errorsOf(aClient(keyPrefix), pattern);

    expect(theirs).toEqual({
      error: { status: 'error', message: 'Internal server error' },
      'rpc-string': { status: 'error', message: 'no such sku' },
      'rpc-object': { code: 'NOT_FOUND', sku: 'A-1' },
      'http-exception': { status: 'error', message: 'Internal server error' },
      string: { status: 'error', message: 'Internal server error' },
    });
    expect(ours).toEqual(theirs);
  });
});
