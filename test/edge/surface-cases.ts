import 'reflect-metadata';
import { execFile } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { Controller, Injectable, type LoggerService, Module } from '@nestjs/common';
import { EventPattern, MessagePattern, Payload } from '@nestjs/microservices';
import { Test } from '@nestjs/testing';
import { createDashboard } from '@redis-stream-coordinator/dashboard';
import { CoordinatorHealthIndicator, CoordinatorModule, StreamListener } from '@redis-stream-coordinator/nestjs';
import { CoordinatorClientProxy, inboxKey, RedisStreamsServer } from '@redis-stream-coordinator/nestjs/microservices';
import { CoordinatorTesting } from '@redis-stream-coordinator/nestjs/testing';
import { lastValueFrom } from 'rxjs';
import { expect } from 'vitest';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';
import { type EdgeCase, type EdgeEnv, maxOf, STOP_BOUND_MS } from './edge-kit';

const quiet: LoggerService = { log() {}, error() {}, debug() {}, verbose() {}, warn() {} };

/** A Nest microservice with RedisStreamsServer on the file's server, listening, every member joined; closed after the case. */
async function aMicroservice(env: EdgeEnv, controllers: unknown[], keyPrefix: string) {
  const server = new RedisStreamsServer({
    redis: { url: env.redis.server.url },
    coordinator: { keyPrefix },
    consumerGroup: 'service',
    shardCount: 4,
  });
  const module = await Test.createTestingModule({ controllers: controllers as never[] })
    .setLogger(quiet)
    .compile();
  const app = module.createNestMicroservice({ strategy: server, logger: quiet });
  env.onEnd(() => app.close());
  await app.listen();
  await pollUntil('every member joined', async () => server.stats().patterns.every((p) => p.members.every((m) => m.stats.joined)), {
    timeoutMs: 120_000,
    intervalMs: 200,
  });
  return { app, server };
}

/** The `rsc` command (the built binary, as cli.test.ts runs it). */
function rsc(env: EdgeEnv, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const bin = path.resolve(__dirname, '../../packages/cli/dist/main.js');
  return new Promise((resolve) => {
    execFile(process.execPath, [bin, '--url', env.redis.server.url, ...args], { timeout: 30_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** The options of the Nest transport, the dashboard and `rsc`, at their maxima. */
export const SURFACE_CASES: EdgeCase[] = [
  {
    title:
      'CoordinatorClientProxy timeoutMs and inboxTtlMs at their maximum: a request is answered (not timed out at once), its inbox lives a day',
    covers: ['nestjs.client.timeoutMs', 'nestjs.client.inboxTtlMs'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const keyPrefix = uniqueName('edge-ms');
      const prices = uniqueName('prices');
      @Controller()
      class PricesController {
        @MessagePattern(prices)
        price(@Payload() request: { sku: string }) {
          return { sku: request.sku, price: 42 };
        }
      }
      await aMicroservice(env, [PricesController], keyPrefix);
      const client = new CoordinatorClientProxy({
        redis: { url: env.redis.server.url },
        keyPrefix,
        timeoutMs: maxOf('nestjs.client.timeoutMs'),
        inboxTtlMs: maxOf('nestjs.client.inboxTtlMs'),
      });
      env.onEnd(() => client.close());
      await expect(lastValueFrom(client.send(prices, { sku: 'A-1' }))).resolves.toEqual({ sku: 'A-1', price: 42 });
      const inboxes = await env.redis.client().keys(inboxKey(keyPrefix, '*'));
      const ttls = await Promise.all(inboxes.map((key) => env.redis.client().pttl(key)));
      expect(ttls.length).toBeGreaterThan(0);
      expect(ttls.every((ttl) => ttl > maxOf('nestjs.client.inboxTtlMs') - 60_000)).toBe(true);
    },
  },
  {
    title:
      'concurrency at its maximum (RedisStreamsServer, as @StreamListener): every member joins, events are handled, and the application closes',
    covers: ['nestjs.concurrency'],
    tier: 'slow',
    timeoutMs: 600_000,
    run: async (env) => {
      const keyPrefix = uniqueName('edge-nest');
      const orders = uniqueName('orders');
      const seen: number[] = [];
      @Controller()
      class OrdersController {
        @EventPattern<string>(orders, { consumerGroup: 'billing', concurrency: maxOf('nestjs.concurrency') })
        onOrder(@Payload() payload: { n: number }) {
          seen.push(payload.n);
        }
      }
      const { app, server } = await aMicroservice(env, [OrdersController], keyPrefix);
      expect(server.stats().patterns[0].members).toHaveLength(maxOf('nestjs.concurrency'));
      const client = new CoordinatorClientProxy({ redis: { url: env.redis.server.url }, keyPrefix });
      env.onEnd(() => client.close());
      for (let n = 0; n < 20; n++) await lastValueFrom(client.emit(orders, { n }));
      await pollUntil('20 events handled', async () => seen.length >= 20, { timeoutMs: 60_000 });
      expect([...new Set(seen)].sort((a, b) => a - b)).toEqual([...Array(20).keys()]);
      await app.close();
    },
  },
  {
    title:
      "CoordinatorModule's startRetryDelayMs and healthCheckTimeoutMs, the testing kit's timeoutMs and failNext count at their maximum: the application starts, is healthy, a wait resolves as soon as its entry is dead-lettered or handled, and it closes at once",
    covers: ['nestjs.startRetryDelayMs', 'nestjs.healthCheckTimeoutMs', 'nestjs.testing.timeoutMs', 'nestjs.testing.failNext.count'],
    tier: 'quick',
    timeoutMs: 60_000,
    run: async (env) => {
      const stream = uniqueName('edge-kit');
      const seen: number[] = [];
      @Injectable()
      class Notes {
        @StreamListener({ streamPrefix: stream, consumerGroup: 'notes', shardCount: 1, maxAttempts: 2, retryBackoffMs: 1 })
        onNote(message: { payload: { n: number } }) {
          seen.push(message.payload.n);
        }
      }
      @Module({
        imports: [
          CoordinatorModule.forRoot({
            redis: { url: env.redis.server.url },
            startRetryDelayMs: maxOf('nestjs.startRetryDelayMs'),
            healthCheckTimeoutMs: maxOf('nestjs.healthCheckTimeoutMs'),
          }),
        ],
        providers: [Notes],
      })
      class AppModule {}
      const app = await Test.createTestingModule({ imports: [AppModule] })
        .setLogger(quiet)
        .compile();
      env.onEnd(() => app.close());
      const kit = CoordinatorTesting.attach(app);
      const timeoutMs = maxOf('nestjs.testing.timeoutMs');
      await app.init();
      await kit.ready({ timeoutMs });
      const health = await app.get(CoordinatorHealthIndicator).check();
      expect(health.coordinator.problems).toEqual([]);
      expect(health.coordinator.connections.map((c) => c.status)).toEqual(['up']);
      // Every attempt fails (the count never runs out here): the entry is dead-lettered after its two.
      const failing = kit.failNext({ group: 'notes' }, maxOf('nestjs.testing.failNext.count'));
      const poisoned = await kit.publish(stream, { key: 'k', payload: { n: 1 } });
      await kit.deadLettered({ group: 'notes' }, poisoned, { timeoutMs });
      expect([failing.failed, failing.remaining]).toEqual([2, maxOf('nestjs.testing.failNext.count') - 2]);
      failing.remove();
      const fine = await kit.publish(stream, { key: 'k', payload: { n: 2 } });
      await kit.handled({ group: 'notes' }, fine, { timeoutMs });
      expect(seen).toEqual([2]);
      const closing = performance.now();
      await app.close();
      expect(performance.now() - closing, 'close() with a day-long start retry delay').toBeLessThan(STOP_BOUND_MS);
    },
  },
  {
    title: 'the dashboard with refreshMs at its maximum: the page and a group live stream answer at once, not a refresh later',
    covers: ['dashboard.refreshMs'],
    tier: 'quick',
    timeoutMs: 30_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-dash');
      await env.admin().createStream({ streamPrefix, shardCount: 2 });
      await env.member(streamPrefix, 'a', { handler: () => undefined }).start();
      const dashboard = createDashboard({ redis: env.redis.client(), refreshMs: maxOf('dashboard.refreshMs') });
      const server = http.createServer((request, response) => void dashboard.handle(request, response));
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const controller = new AbortController();
      env.onEnd(async () => {
        controller.abort();
        await dashboard.close();
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      });
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/rsc`;
      expect((await fetch(`${url}/`)).status).toBe(200);
      const started = performance.now();
      const live = await fetch(`${url}/api/groups/${streamPrefix}/group/live`, { signal: controller.signal });
      const reader = live.body!.getReader();
      let text = '';
      while (!/\ndata: .*"members"/.test(text)) text += new TextDecoder().decode((await reader.read()).value);
      expect(performance.now() - started).toBeLessThan(STOP_BOUND_MS);
      expect(text).toContain(`retry: ${maxOf('dashboard.refreshMs')}`);
    },
  },
  {
    title: 'rsc resize --timeout at its maximum: it follows the ordered growth until every group completed its cutover, and exits 0',
    covers: ['rsc.resize.timeout'],
    tier: 'slow',
    timeoutMs: 60_000,
    run: async (env) => {
      const streamPrefix = uniqueName('edge-rsc');
      await env.admin().createStream({ streamPrefix, shardCount: 2 });
      await env.member(streamPrefix, 'a', { handler: () => undefined }).start();
      const resize = await rsc(env, 'resize', streamPrefix, '3', '--grace-ms', '200', '--timeout', String(maxOf('rsc.resize.timeout')));
      expect([resize.code, resize.stderr]).toEqual([0, '']);
      expect(resize.stdout).toMatch(/^group group: (cutover complete|reads every shard)$/m);
    },
  },
];
