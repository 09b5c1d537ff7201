import 'reflect-metadata';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  type CallHandler,
  type CanActivate,
  Controller,
  type ExecutionContext,
  Injectable,
  type NestInterceptor,
  type PipeTransform,
  UseGuards,
  UseInterceptors,
  UsePipes,
} from '@nestjs/common';
import { Ctx, EventPattern, MessagePattern, Payload, RpcException } from '@nestjs/microservices';
import { lastValueFrom, of, tap, toArray } from 'rxjs';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder } from '@redis-stream-coordinator/core';
import {
  CORRELATION_ID_HEADER,
  CoordinatorClientProxy,
  REPLY_TO_HEADER,
  RedisStreamsContext,
  RequestTimeoutError,
  StreamRecord,
  inboxKey,
} from '@redis-stream-coordinator/nestjs/microservices';
import { pollUntil } from '../support/poll';
import { useTransportApps } from '../support/transport-apps';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const { aMicroservice, aClient, deadLettersOf, cleanups } = useTransportApps(redis);

describe('RedisStreamsServer: @EventPattern handlers are members', () => {
  it('an @EventPattern<string>(prefix) with extras runs `concurrency` members of its group; emit() routes by the key option or a StreamRecord; @Ctx() is a RedisStreamsContext', async () => {
    const orders = uniqueName('orders');
    const seen: {
      payload: { n: number; customer: string };
      key?: string;
      tenant?: string;
      group: string;
      memberId: string;
      shard: number;
      isContext: boolean;
    }[] = [];

    @Controller()
    class OrdersController {
      @EventPattern<string>(orders, { consumerGroup: 'billing', concurrency: 2 })
      onOrder(@Payload() payload: { n: number; customer: string }, @Ctx() context: RedisStreamsContext) {
        seen.push({
          payload,
          key: context.getKey(),
          tenant: context.getHeaders().tenant,
          group: context.getConsumerGroup(),
          memberId: context.getMemberId(),
          shard: context.getShardIndex(),
          isContext: context instanceof RedisStreamsContext && context.getMessage().payload === payload,
        });
      }
    }

    const { server, keyPrefix } = await aMicroservice([OrdersController]);
    expect(server.stats().patterns).toEqual([expect.objectContaining({ streamPrefix: orders, consumerGroup: 'billing', kind: 'event' })]);
    expect(server.stats().patterns[0].members.map((m) => m.stats.joined)).toEqual([true, true]);

    const client = aClient(keyPrefix, { key: (data) => (data as { customer: string }).customer });
    for (let n = 0; n < 10; n++) await lastValueFrom(client.emit(orders, { n, customer: `c${n % 3}` }));
    await lastValueFrom(client.emit(orders, new StreamRecord({ n: 10, customer: 'c0' }, { key: 'override', headers: { tenant: 'acme' } })));

    await pollUntil('11 orders handled', async () => seen.length === 11);
    expect(seen.map((s) => s.payload.n).sort((a, b) => a - b)).toEqual([...Array(11).keys()]);
    expect(seen.every((s) => s.isContext && s.group === 'billing')).toBe(true);
    expect(seen.find((s) => s.payload.n === 4)?.key).toBe('c1');
    expect(seen.find((s) => s.payload.n === 10)).toMatchObject({ key: 'override', tenant: 'acme' });
    // One key's entries all went to one shard.
    const shardsOfC0 = new Set(seen.filter((s) => s.key === 'c0').map((s) => s.shard));
    expect(shardsOfC0.size).toBe(1);
  });

  it('a pattern without a consumer group fails the start with an error naming the pattern', async () => {
    const prefix = uniqueName('nogroup');
    @Controller()
    class NoGroupController {
      @EventPattern<string>(prefix)
      on() {}
    }
    await expect(aMicroservice([NoGroupController], { consumerGroup: undefined })).rejects.toThrow(
      `RedisStreamsServer: pattern "${prefix}": consumerGroup is required`,
    );
  });

  it("workers: the most specific level that sets runtimeMaxConcurrency or lanes decides (the pattern's lanes over the server's runtimeMaxConcurrency)", async () => {
    const [plain, laned, tuned] = [uniqueName('workers-plain'), uniqueName('workers-laned'), uniqueName('workers-tuned')];
    @Controller()
    class WorkersController {
      @EventPattern<string>(plain)
      onPlain() {}
      @EventPattern<string>(laned, { lanes: 6 })
      onLaned() {}
      @EventPattern<string>(tuned)
      onTuned() {}
    }
    const { server } = await aMicroservice([WorkersController], {
      runtimeMaxConcurrency: 3,
      streams: { [tuned]: { lanes: 4, runtimeMaxConcurrency: 2 } },
    });
    const members = server.unwrap<{ members: import('@redis-stream-coordinator/core').CoordinatedMember[] }>().members;
    expect(Object.fromEntries(members.map((m) => [m.options.streamPrefix, [m.options.runtimeMaxConcurrency, m.options.lanes]]))).toEqual({
      [plain]: [3, 1],
      [laned]: [6, 6],
      [tuned]: [2, 4],
    });
  });

  it('batch is refused, naming the pattern: a pattern handler gets one entry per call', async () => {
    const prefix = uniqueName('no-batch');
    @Controller()
    class BatchController {
      @EventPattern<string>(prefix, { batch: { maxSize: 10 } })
      on() {}
    }
    await expect(aMicroservice([BatchController])).rejects.toThrow(
      `RedisStreamsServer: pattern "${prefix}": batch is not supported by the microservices transport`,
    );
  });
});

describe("RedisStreamsServer: Nest's RPC pipeline applies", () => {
  it('guards, interceptors and pipes run with the rpc context; a guard that says no and a handler that throws get the entry retried, then dead-lettered', async () => {
    const prefix = uniqueName('enhanced');
    const calls: string[] = [];

    @Injectable()
    class TenantGuard implements CanActivate {
      canActivate(context: ExecutionContext) {
        const stream = context.switchToRpc().getContext<RedisStreamsContext>();
        calls.push(`guard:${context.getType()}:${stream.getHeaders().tenant ?? '-'}`);
        return stream.getHeaders().tenant !== 'blocked';
      }
    }
    @Injectable()
    class Trace implements NestInterceptor {
      intercept(context: ExecutionContext, next: CallHandler) {
        const data = context.switchToRpc().getData<{ text: string }>();
        return next.handle().pipe(tap(() => calls.push(`after:${data.text}`)));
      }
    }
    class UpperCase implements PipeTransform {
      transform(value: unknown) {
        return typeof value === 'object' && value !== null && 'text' in value
          ? { ...value, text: String((value as { text: string }).text).toUpperCase() }
          : value;
      }
    }

    @Controller()
    @UseGuards(TenantGuard)
    class EnhancedController {
      @EventPattern<string>(prefix)
      @UseInterceptors(Trace)
      @UsePipes(UpperCase)
      on(@Payload() payload: { text: string }) {
        if (payload.text === 'BOOM') throw new Error('boom');
        calls.push(`handled:${payload.text}`);
      }
    }

    const global: NestInterceptor = { intercept: (_context, next) => next.handle().pipe(tap(() => calls.push('global'))) };
    const { server, keyPrefix } = await aMicroservice([EnhancedController], {}, (app) => app.useGlobalInterceptors(global));
    const deadLetters = deadLettersOf(server);
    const client = aClient(keyPrefix);
    await lastValueFrom(client.emit(prefix, new StreamRecord({ text: 'hi' }, { headers: { tenant: 'acme' } })));
    await pollUntil('handled', async () => calls.includes('global'));
    expect(calls).toEqual(['guard:rpc:acme', 'handled:HI', 'after:hi', 'global']);

    await lastValueFrom(client.emit(prefix, new StreamRecord({ text: 'x' }, { headers: { tenant: 'blocked' } })));
    await lastValueFrom(client.emit(prefix, { text: 'boom' }));
    await pollUntil('two dead letters', async () => deadLetters.length === 2);
    expect(calls.filter((c) => c === 'guard:rpc:blocked')).toHaveLength(2); // maxAttempts 2: tried twice
    expect(calls).not.toContain('handled:X');
    // The dead letter's reason is what was thrown (not Nest's RPC filter's answer): the guard's "no", the handler's error.
    expect(deadLetters.map((d) => d.reason)).toEqual(['RpcException: Forbidden resource', 'Error: boom']);
  });
});

describe('CoordinatorClientProxy: delayed events (docs/runtime.md, Delayed delivery)', () => {
  it('emit() with a StreamRecord delayMs waits in the shard schedule and is handled once due; send() with a delay is refused', async () => {
    const reminders = uniqueName('reminders');
    const seen: { text: string; at: number }[] = [];

    @Controller()
    class RemindersController {
      @EventPattern<string>(reminders)
      on(@Payload() payload: { text: string }) {
        seen.push({ text: payload.text, at: Date.now() });
      }
    }

    const { keyPrefix } = await aMicroservice([RemindersController]);
    const client = aClient(keyPrefix);
    const sent = Date.now();
    await lastValueFrom(client.emit(reminders, new StreamRecord({ text: 'later' }, { key: 'u1', delayMs: 800 })));
    const keys = new KeyBuilder(keyPrefix);
    const scheduled = await Promise.all([0, 1].map((shard) => redis.client().zcard(keys.shardSchedule(reminders, shard))));
    expect(scheduled.reduce((a, b) => a + b, 0) + seen.length).toBe(1); // in a schedule (or, on a loaded machine, already handled)
    await pollUntil('the delayed event handled', async () => seen.length === 1, { timeoutMs: 15_000 });
    expect(seen[0].at - sent).toBeGreaterThanOrEqual(800 - 5); // the producer's clock against Redis': one machine here
    await expect(lastValueFrom(client.send(reminders, new StreamRecord({ text: 'ask' }, { delayMs: 10 })))).rejects.toThrow(
      'a request cannot be delayed',
    );
  });
});

describe('RedisStreamsServer + CoordinatorClientProxy: request/reply', () => {
  it('send() gets every value of a @MessagePattern handler, its RpcException as an error, through the per-client inbox', async () => {
    const prices = uniqueName('prices');
    const quotes = uniqueName('quotes');

    @Controller()
    class PricesController {
      @MessagePattern(prices)
      price(@Payload() query: { sku: string }, @Ctx() context: RedisStreamsContext) {
        if (query.sku === 'missing') throw new RpcException({ code: 'NOT_FOUND', sku: query.sku });
        return { sku: query.sku, price: 42, shard: context.getShardIndex() };
      }

      @MessagePattern(quotes)
      quotes() {
        return of(1, 2, 3);
      }
    }

    const { server, keyPrefix } = await aMicroservice([PricesController]);
    const client = aClient(keyPrefix);
    await expect(lastValueFrom(client.send(prices, { sku: 'A-1' }))).resolves.toMatchObject({ sku: 'A-1', price: 42 });
    await expect(lastValueFrom(client.send(quotes, {}).pipe(toArray()))).resolves.toEqual([1, 2, 3]);
    await expect(lastValueFrom(client.send(prices, { sku: 'missing' }))).rejects.toEqual({ code: 'NOT_FOUND', sku: 'missing' });
    const concurrent = await Promise.all([...Array(20).keys()].map((i) => lastValueFrom(client.send(prices, { sku: `S${i}` }))));
    expect(concurrent.map((r) => (r as { sku: string }).sku)).toEqual([...Array(20).keys()].map((i) => `S${i}`));
    expect(client.stats()).toMatchObject({ pendingRequests: 0, timedOut: 0 });
    expect(server.stats()).toMatchObject({ droppedReplies: 0, failedReplies: 0 });
    // Read replies are trimmed: the inbox holds nothing once every reply was delivered.
    await pollUntil('inbox trimmed', async () => (await redis.client().xlen(client.inboxKey)) === 0);
  });

  it('a reply later than timeoutMs fails send() with RequestTimeoutError; a queued request whose requester stopped waiting is skipped', async () => {
    const slow = uniqueName('slow');
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const handled: string[] = [];

    @Controller()
    class SlowController {
      @MessagePattern(slow)
      async answer(@Payload() request: { name: string }) {
        handled.push(request.name);
        if (request.name === 'first') await released;
        return request.name;
      }
    }

    const { server, keyPrefix } = await aMicroservice([SlowController], { shardCount: 1 });
    const client = aClient(keyPrefix, { timeoutMs: 300 });
    const first = lastValueFrom(client.send(slow, { name: 'first' }));
    await pollUntil('first request running', async () => handled.includes('first'));
    const second = lastValueFrom(client.send(slow, { name: 'second' }));
    await expect(first).rejects.toBeInstanceOf(RequestTimeoutError);
    await expect(second).rejects.toThrow(`no reply to a request on ${JSON.stringify(slow)} within 300 ms`);
    release();
    // (Seen once in CI, not reproduced: the wait ran out. Its failure says what both sides counted.)
    await pollUntil('late reply of the first dropped by the client', async () => client.stats().lateReplies === 1).catch((error: Error) => {
      throw new Error(
        `${error.message}: client ${JSON.stringify(client.stats())}, server ${JSON.stringify(server.stats())}, handled ${JSON.stringify(handled)}`,
      );
    });
    await pollUntil('the second skipped by the server', async () => server.stats().expiredRequests === 1);
    expect(handled).toEqual(['first']);
    expect(client.stats()).toMatchObject({ pendingRequests: 0, timedOut: 2 });
  });
});

describe('events and requests crossing', () => {
  it('send() to an @EventPattern runs it and completes without a value; emit() to a @MessagePattern runs it with no reply', async () => {
    const events = uniqueName('events');
    const requests = uniqueName('requests');
    const seen: string[] = [];
    @Controller()
    class CrossingController {
      @EventPattern<string>(events)
      onEvent(@Payload() value: string) {
        seen.push(`event:${value}`);
      }

      @MessagePattern(requests)
      onRequest(@Payload() value: string) {
        seen.push(`request:${value}`);
        return value;
      }
    }
    const { server, keyPrefix } = await aMicroservice([CrossingController]);
    const client = aClient(keyPrefix);
    await expect(lastValueFrom(client.send(events, 'a'), { defaultValue: 'no value' })).resolves.toBe('no value');
    await lastValueFrom(client.emit(requests, 'b'));
    await pollUntil('the emitted entry handled', async () => seen.includes('request:b'));
    expect(seen).toEqual(['event:a', 'request:b']);
    expect(server.stats()).toMatchObject({ droppedReplies: 0, failedReplies: 0, expiredRequests: 0 });
  });
});

describe('reply inboxes are cleaned up', () => {
  it('close() deletes the inbox; a client that dies without close() loses it to its TTL; a late reply never recreates it', async () => {
    const echo = uniqueName('echo');
    @Controller()
    class EchoController {
      @MessagePattern(echo)
      echo(@Payload() value: unknown) {
        return value;
      }
    }
    const { server, keyPrefix } = await aMicroservice([EchoController]);
    const probe = redis.client();

    const closing = aClient(keyPrefix);
    await lastValueFrom(closing.send(echo, 1));
    expect(await probe.exists(closing.inboxKey)).toBe(1);
    expect(await probe.pttl(closing.inboxKey)).toBeGreaterThan(0);
    await closing.close();
    expect(await probe.exists(closing.inboxKey)).toBe(0);

    const dying = aClient(keyPrefix, { inboxTtlMs: 400 });
    await lastValueFrom(dying.send(echo, 2));
    dying.unwrap<import('ioredis').Redis>().disconnect(); // the process "dies": nothing refreshes the TTL
    await pollUntil('abandoned inbox expired', async () => (await probe.exists(dying.inboxKey)) === 0, { timeoutMs: 5000 });

    // A request naming an inbox that is gone (written the way the client writes it): the reply is dropped, the key stays gone.
    const gone = inboxKey(keyPrefix, randomUUID());
    const client = aClient(keyPrefix);
    await lastValueFrom(
      client.emit(echo, new StreamRecord(3, { headers: { [REPLY_TO_HEADER]: gone, [CORRELATION_ID_HEADER]: randomUUID() } })),
    );
    await pollUntil('reply dropped', async () => server.stats().droppedReplies === 1);
    expect(await probe.exists(gone)).toBe(0);
    const admin = new CoordinatorAdmin(probe, { keyPrefix });
    await pollUntil('request acknowledged', async () =>
      (await admin.describeGroup(echo, 'service')).shards.every((shard) => shard.pending === 0 && shard.lag === 0),
    );
  });
});

describe('a reply Redis does not take', () => {
  it('counts it, reports an error event, and retries the request until it is dead-lettered', async () => {
    const echo = uniqueName('unwritable');
    let calls = 0;
    @Controller()
    class EchoController {
      @MessagePattern(echo)
      echo(@Payload() value: unknown) {
        calls += 1;
        return value;
      }
    }
    const { server, keyPrefix } = await aMicroservice([EchoController]);
    const errors: Error[] = [];
    server.on('error', (error: Error) => errors.push(error));
    const deadLetters = deadLettersOf(server);
    // The "inbox" is a string: XADD fails with WRONGTYPE, as any refused write would.
    const inbox = inboxKey(keyPrefix, randomUUID());
    const correlationId = randomUUID();
    await redis.client().set(inbox, 'not a stream');
    const client = aClient(keyPrefix);
    await lastValueFrom(
      client.emit(echo, new StreamRecord('x', { headers: { [REPLY_TO_HEADER]: inbox, [CORRELATION_ID_HEADER]: correlationId } })),
    );
    await pollUntil('request dead-lettered', async () => deadLetters.length === 1);
    expect(calls).toBe(2); // maxAttempts 2: the handler ran again with the retry
    expect(server.stats().failedReplies).toBe(2);
    expect(deadLetters[0].reason).toContain(`the reply to request ${correlationId} on ${echo} was not written to ${inbox}: WRONGTYPE`);
    expect(errors.map((e) => e.message)).toEqual([expect.stringContaining('WRONGTYPE'), expect.stringContaining('WRONGTYPE')]);
  });
});

describe('a reply goes only to an inbox of this transport, and only from the request the client wrote (SPEC 10.4)', () => {
  it("a request whose rsc-reply-to names another stream's shard is refused: nothing appended or trimmed there, the handler not run, one error event, refusedRequests, the entry acknowledged", async () => {
    const prices = uniqueName('prices');
    let calls = 0;
    @Controller()
    class PricesController {
      @MessagePattern(prices)
      price() {
        calls += 1;
        return 42;
      }
    }
    const { server, keyPrefix } = await aMicroservice([PricesController], { shardCount: 1 });
    const errors: Error[] = [];
    server.on('error', (error: Error) => errors.push(error));
    // Another stream's shard with more unread entries than an inbox keeps (MAXLEN ~ 10000).
    const orders = new KeyBuilder(keyPrefix).shardStream(uniqueName('orders'), 0);
    const probe = redis.client();
    const fill = probe.pipeline();
    for (let i = 0; i < 12_000; i++) fill.xadd(orders, '*', 'n', String(i));
    await fill.exec();
    const client = aClient(keyPrefix);
    const forged = [orders, `${keyPrefix}:inbox:{not-a-uuid}`, inboxKey(`${keyPrefix}-other`, randomUUID())];
    for (const replyTo of forged) {
      await lastValueFrom(
        client.emit(prices, new StreamRecord('q', { headers: { [REPLY_TO_HEADER]: replyTo, [CORRELATION_ID_HEADER]: randomUUID() } })),
      );
    }
    const admin = new CoordinatorAdmin(probe, { keyPrefix });
    await pollUntil('the requests acknowledged', async () =>
      (await admin.describeGroup(prices, 'service')).shards.every((shard) => shard.pending === 0 && shard.lag === 0),
    );
    expect(await probe.xlen(orders)).toBe(12_000);
    expect(calls).toBe(0);
    expect(server.stats()).toMatchObject({ refusedRequests: 3, droppedReplies: 0, failedReplies: 0 });
    expect(errors).toHaveLength(3);
    expect(errors[0].message).toContain(`is not a reply inbox of this transport (${keyPrefix}:inbox:{<client uuid>})`);
  });

  it('a reply to a waiting request from another entry than the one the client wrote is refused: send() still gets the real answer', async () => {
    const prices = uniqueName('prices');
    const echo = uniqueName('echo');
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    @Controller()
    class Controllers {
      @MessagePattern(prices)
      async price() {
        await released;
        return 'real';
      }

      @MessagePattern(echo)
      echo(@Payload() value: unknown) {
        return value;
      }
    }
    const { keyPrefix } = await aMicroservice([Controllers], { shardCount: 1 });
    const victim = aClient(keyPrefix, { timeoutMs: 10_000 });
    const answer = lastValueFrom(victim.send(prices, {}));
    // Whoever can read the stream sees the request's inbox and correlation id, and writes a request of its own with them.
    const shard = new KeyBuilder(keyPrefix).shardStream(prices, 0);
    const probe = redis.client();
    await pollUntil('the request written', async () => (await probe.xlen(shard)) === 1);
    const [[, fields]] = await probe.xrange(shard, '-', '+');
    const headers = JSON.parse(fields[fields.indexOf('h') + 1]) as Record<string, string>;
    const forger = aClient(keyPrefix);
    const stolen = { [REPLY_TO_HEADER]: headers[REPLY_TO_HEADER], [CORRELATION_ID_HEADER]: headers[CORRELATION_ID_HEADER] };
    await lastValueFrom(forger.emit(echo, new StreamRecord('forged', { headers: stolen })));
    await pollUntil('the forged reply refused', async () => victim.stats().refusedReplies === 1);
    release();
    await expect(answer).resolves.toBe('real');
    expect(victim.stats()).toMatchObject({ pendingRequests: 0, refusedReplies: 1 });
  });
});

describe('@EventPattern, request: handled as an event', () => {
  it('a send() to an @EventPattern handler that waited behind a slow entry past timeoutMs still runs it: an event is never skipped', async () => {
    const events = uniqueName('events');
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const handled: string[] = [];
    @Controller()
    class EventsController {
      @EventPattern<string>(events)
      async onEvent(@Payload() name: string) {
        handled.push(name);
        if (name === 'slow') await released;
      }
    }
    const { server, keyPrefix } = await aMicroservice([EventsController], { shardCount: 1 });
    const client = aClient(keyPrefix, { timeoutMs: 300 });
    await lastValueFrom(client.emit(events, 'slow'));
    await pollUntil('the slow event running', async () => handled.includes('slow'));
    await expect(lastValueFrom(client.send(events, 'queued'))).rejects.toBeInstanceOf(RequestTimeoutError);
    release();
    await pollUntil('the queued event handled', async () => handled.includes('queued')).catch((error: Error) => {
      throw new Error(`${error.message}: handled ${JSON.stringify(handled)}, server ${JSON.stringify(server.stats())}`);
    });
    expect(server.stats().expiredRequests).toBe(0);
  });
});

describe('@nestjs/microservices is optional', () => {
  it('the main entry loads without it; the /microservices entry is where it is needed', async () => {
    const nestjsPackage = path.resolve(__dirname, '../../packages/nestjs');
    // Node resolves nothing named @nestjs/microservices in this child: as in an app that never installed it.
    const script = `
      const Module = require('node:module');
      const resolve = Module._resolveFilename;
      Module._resolveFilename = function (request, ...rest) {
        if (request === '@nestjs/microservices' || request.startsWith('@nestjs/microservices/')) {
          throw Object.assign(new Error("Cannot find module '" + request + "'"), { code: 'MODULE_NOT_FOUND' });
        }
        return resolve.call(this, request, ...rest);
      };
      const main = require(${JSON.stringify(path.join(nestjsPackage, 'dist/index.js'))});
      if (typeof main.CoordinatorModule !== 'function') throw new Error('main entry incomplete');
      let subpath = 'loaded';
      try { require(${JSON.stringify(path.join(nestjsPackage, 'dist/microservices/index.js'))}); } catch (error) { subpath = error.message; }
      process.stdout.write(JSON.stringify({ subpath }));
    `;
    const { stdout } = await promisify(execFile)(process.execPath, ['-e', script], { cwd: nestjsPackage });
    expect(JSON.parse(stdout)).toEqual({ subpath: "Cannot find module '@nestjs/microservices'" });
  });
});

describe('the transport example of docs/nestjs.md', () => {
  const EXAMPLE = path.join(__dirname, '../examples/microservices-transport.ts');

  it('is the example file, word for word', () => {
    const docs = fs.readFileSync(path.join(__dirname, '../../docs/nestjs.md'), 'utf8');
    const block = /<!-- example: test\/examples\/microservices-transport\.ts -->\n```ts\n([\s\S]*?)```/.exec(docs);
    expect(block, 'docs/nestjs.md has the example block').not.toBeNull();
    expect(block![1]).toBe(fs.readFileSync(EXAMPLE, 'utf8'));
  });

  it('runs: emit() reaches the @EventPattern members by key, send() gets the @MessagePattern answer, close() removes the inbox', async () => {
    process.env.REDIS_URL = redis.server.url;
    const { bootstrap, Checkout, OrdersController } = await import('../examples/microservices-transport');
    const app = await bootstrap();
    cleanups.push(() => app.close());
    const checkout = app.get(Checkout);
    const client = app.get<CoordinatorClientProxy>('BILLING');
    await expect(checkout.place({ id: 'o-1', customerId: 'c-7', total: 12 })).resolves.toEqual({ sku: 'o-1', price: 30 });
    const orders = app.get(OrdersController);
    await pollUntil('both entries handled', async () => orders.handled.length === 2);
    expect(orders.handled.sort()).toEqual(['o-1 key=c-7 tenant=-', 'o-1 key=o-1 tenant=acme']);
    const inbox = client.inboxKey;
    expect(await redis.client().exists(inbox)).toBe(1);
    await app.close();
    expect(await redis.client().exists(inbox)).toBe(0);
  });
});
