import 'reflect-metadata';
import type { AddressInfo } from 'node:net';
import { Controller, Get, type INestApplication, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { HealthCheck, HealthCheckService, TerminusModule } from '@nestjs/terminus';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { CoordinatorHealthIndicator, CoordinatorModule, CoordinatorRegistry, StreamListener } from '@redis-stream-coordinator/nestjs';
import { quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { uniqueName } from '../support/vitest-redis';

const quiet = quietLogger;
const cleanups: (() => Promise<unknown>)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

/** The probes as the docs show them: TerminusModule, one endpoint per probe. */
@Controller('health')
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly coordinator: CoordinatorHealthIndicator,
  ) {}

  @Get('ready')
  @HealthCheck()
  ready() {
    return this.health.check([() => this.coordinator.isReady('coordinator')]);
  }

  @Get('live')
  @HealthCheck()
  live() {
    return this.health.check([() => this.coordinator.isLive('coordinator')]);
  }

  /** The indicator's older name, which terminus users already wire up. */
  @Get()
  @HealthCheck()
  healthy() {
    return this.health.check([() => this.coordinator.isHealthy('coordinator')]);
  }
}

/** A real HTTP application on its own redis-server, with one listener, listening on a free port. */
async function anHttpApp() {
  const server = await RedisServer.start();
  cleanups.push(() => server.stop());
  const streamPrefix = uniqueName('terminus');
  @Injectable()
  class Listener {
    @StreamListener({ streamPrefix, consumerGroup: 'g', shardCount: 2, sessionTimeoutMs: 1500 })
    handle() {}
  }
  @Module({
    imports: [
      TerminusModule.forRoot({ logger: false }),
      CoordinatorModule.forRoot({
        redis: { url: server.url },
        coordinator: { heartbeatIntervalMs: 200 },
        healthCheckTimeoutMs: 300,
        startRetryDelayMs: 100,
      }),
    ],
    controllers: [HealthController],
    providers: [Listener],
  })
  class AppModule {}
  const app: INestApplication = await NestFactory.create(AppModule, { logger: quiet });
  cleanups.push(() => app.close());
  await app.listen(0, '127.0.0.1');
  const { port } = app.getHttpServer().address() as AddressInfo;
  const get = async (path: string) => {
    const response = await fetch(`http://127.0.0.1:${port}${path}`);
    return { status: response.status, body: (await response.json()) as { status: string; error: Record<string, { problems: string[] }> } };
  };
  return { app, server, get };
}

describe('CoordinatorHealthIndicator with @nestjs/terminus over HTTP', () => {
  it('readiness is 200 when joined and 503 with the reasons while Redis is down; liveness stays 200; both recover', async () => {
    const { server, get } = await anHttpApp();
    await pollUntil('ready', async () => (await get('/health/ready')).status === 200);
    expect((await get('/health')).status).toBe(200);
    expect(await get('/health/live')).toMatchObject({ status: 200, body: { status: 'ok' } });

    await server.kill();
    const notReady = await pollUntil('readiness 503', async () => {
      const response = await get('/health/ready');
      return response.status === 503 && response;
    });
    expect(notReady.body.status).toBe('error');
    expect(notReady.body.error.coordinator.problems).toContainEqual(expect.stringMatching(/^Redis connection "default": /));
    expect((await get('/health')).status).toBe(503); // not 500: the indicator resolves down, it does not reject
    // A Redis outage must not make Kubernetes restart every pod.
    expect(await get('/health/live')).toMatchObject({ status: 200, body: { status: 'ok' } });

    await server.restart();
    await pollUntil('ready again', async () => (await get('/health/ready')).status === 200, { timeoutMs: 20_000 });
  });

  it("liveness is 503 when a member stopped for good (its id is another live process's); readiness too", async () => {
    const { app, get } = await anHttpApp();
    await pollUntil('ready', async () => (await get('/health/ready')).status === 200);
    const [member] = app.get(CoordinatorRegistry).members();
    // What the core runtime emits when another live process takes this member id.
    member.emit('error', Object.assign(new Error('another live process has this member id'), { name: 'FencedInstanceIdError' }));
    const live = await get('/health/live');
    expect(live.status).toBe(503);
    expect(live.body.error.coordinator.problems).toEqual([
      expect.stringMatching(/^member .*-m0 \(Listener.handle-m0@[^)]+\): stopped for good: FencedInstanceIdError/),
    ]);
    expect((await get('/health/ready')).status).toBe(503);
  });
});
