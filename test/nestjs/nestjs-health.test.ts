import 'reflect-metadata';
import { Injectable, type LoggerService, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CoordinatedMember } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import {
  type CoordinatorHealth,
  CoordinatorHealthIndicator,
  type CoordinatorModuleOptions,
  CoordinatorModule,
  CoordinatorRegistry,
  StreamListener,
} from '@redis-stream-coordinator/nestjs';
import { closedAfterEach, quietLogger } from '../support/nest-apps';
import { pollUntil } from '../support/poll';
import { TcpProxy } from '../support/tcp-proxy';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();
const quiet = quietLogger;

afterEach(() => {
  vi.restoreAllMocks();
});

async function anApp(
  roots: (Partial<CoordinatorModuleOptions> & { name?: string })[],
  providers: unknown[] = [],
  logger: LoggerService = quiet,
) {
  @Module({ providers: providers as never[] })
  class FeatureModule {}
  const app = await Test.createTestingModule({
    imports: [
      ...roots.map((root) =>
        CoordinatorModule.forRoot({ coordinator: { heartbeatIntervalMs: 200 }, healthCheckTimeoutMs: 300, ...root } as never),
      ),
      FeatureModule,
    ],
  })
    .setLogger(logger)
    .compile();
  apps.push(app);
  await app.init();
  return app;
}

function listener(streamPrefix: string) {
  @Injectable()
  class Listener {
    @StreamListener({ streamPrefix, consumerGroup: 'g', shardCount: 2 })
    handle() {}
  }
  return Listener;
}

const health = async (app: TestingModule): Promise<CoordinatorHealth['coordinator']> =>
  (await app.get(CoordinatorHealthIndicator).check()).coordinator;

describe('CoordinatorHealthIndicator', () => {
  it('is down while Redis is unreachable, even with no member registered, and up once it answers', async () => {
    const server = await RedisServer.start();
    await server.kill(); // the port is known, nothing listens there yet
    try {
      const app = await anApp([{ redis: { url: server.url } }]);
      const down = await health(app);
      expect(down.status).toBe('down');
      expect(down.members).toEqual([]);
      expect(down.problems).toEqual([expect.stringMatching(/^Redis connection "default": not connected/)]);
      // Resolved as down, never rejected: terminus answers 503 for that, 500 for a rejection.
      expect((await app.get(CoordinatorHealthIndicator).isHealthy()).coordinator.status).toBe('down');
      expect(app.get(CoordinatorHealthIndicator).checkLiveness()).toEqual({ coordinator: { status: 'up', problems: [] } });

      await server.restart();
      const up = await pollUntil('health up', async () => (await health(app)).status === 'up' && health(app), { timeoutMs: 20_000 });
      expect(up.connections).toEqual([{ name: 'default', status: 'up', latencyMs: expect.any(Number) }]);
    } finally {
      await server.stop();
    }
  });

  it('is down when Redis stops answering on a live connection: PING has a deadline', async () => {
    const proxy = await TcpProxy.start(redis.server.port);
    try {
      const app = await anApp([{ redis: { url: proxy.url } }]);
      await pollUntil('health up', async () => (await health(app)).status === 'up');
      proxy.freeze();
      const down = await health(app);
      expect(down.status).toBe('down');
      expect(down.problems).toEqual(['Redis connection "default": no reply to PING within 300 ms']);
      proxy.thaw();
      await pollUntil('health up after the thaw', async () => (await health(app)).status === 'up');
    } finally {
      await proxy.stop();
    }
  });

  it('checks every named connection and says which one is down', async () => {
    const server = await RedisServer.start();
    await server.kill();
    try {
      const app = await anApp([{ redis: { url: redis.server.url } }, { name: 'audit', redis: { url: server.url } }]);
      // Checked until the default connection's PING answers within its 300 ms (a loaded machine may
      // miss it once); the audit connection, to a server that is not there, is down in that same check.
      const down = await pollUntil('the default connection up', async () => {
        const checked = await health(app);
        return checked.connections.find((c) => c.name === 'default')?.status === 'up' && checked;
      });
      expect(down.connections.map((c) => `${c.name} ${c.status}`)).toEqual(['default up', 'audit down']);
      expect(down.problems).toEqual([expect.stringMatching(/^Redis connection "audit": not connected/)]);
    } finally {
      await server.stop();
    }
  });

  it('is down while a member reports problems, listing them; isReady resolves that under the given key', async () => {
    const streamPrefix = uniqueName('problems');
    // The member's own problems come from the core runtime; here one is added to a real member's stats.
    const stats = CoordinatedMember.prototype.stats;
    vi.spyOn(CoordinatedMember.prototype, 'stats').mockImplementation(function (this: CoordinatedMember) {
      const real = stats.call(this);
      return { ...real, problems: [...real.problems, 'shard 1: the dead-letter write fails (WRONGTYPE)'] };
    });
    const app = await anApp([{ redis: { url: redis.server.url } }], [listener(streamPrefix)]);
    const down = await pollUntil('the member joined', async () => {
      const h = await health(app);
      return h.members[0]?.joined && h;
    });
    expect(down.status).toBe('down');
    expect(down.members[0].problems).toEqual(['shard 1: the dead-letter write fails (WRONGTYPE)']);
    expect(down.problems).toEqual([
      `member ${down.members[0].memberId} (${down.members[0].memberName}): shard 1: the dead-letter write fails (WRONGTYPE)`,
    ]);

    const ready = await app.get(CoordinatorHealthIndicator).isReady('redis-streams');
    expect(ready['redis-streams']).toMatchObject({ status: 'down', problems: down.problems });
    // A member's problems are for readiness: the process itself is alive.
    expect((await app.get(CoordinatorHealthIndicator).isLive('redis-streams'))['redis-streams'].status).toBe('up');
  });
});

describe('a member id already in use by another live process', () => {
  it('stops that member retrying its start, logs it once as an error, and health reports it', async () => {
    const inUse = uniqueName('in-use');
    const unreachable = uniqueName('unreachable');
    const attempts = new Map<string, number>();
    vi.spyOn(CoordinatedMember.prototype, 'start').mockImplementation(async function (this: CoordinatedMember) {
      const prefix = this.options.streamPrefix;
      attempts.set(prefix, (attempts.get(prefix) ?? 0) + 1);
      // The error another part of the runtime raises for a second live process with this member id.
      const error =
        prefix === inUse
          ? Object.assign(new Error(`member ${this.memberId} is in use by another live process`), { name: 'FencedInstanceIdError' })
          : new Error('connect ECONNREFUSED');
      throw error;
    });
    const errors: string[] = [];
    const app = await anApp([{ redis: { url: redis.server.url }, startRetryDelayMs: 20 }], [listener(inUse), listener(unreachable)], {
      ...quiet,
      error: (message: unknown) => void errors.push(String(message)),
    });
    // The other member, retrying on the same delay, has had many turns: the in-use one would have had them too.
    await pollUntil('the retrying member tried 10 times', async () => (attempts.get(unreachable) ?? 0) >= 10);
    expect(attempts.get(inUse)).toBe(1);
    expect(errors).toEqual([
      expect.stringMatching(
        /stopped for good: FencedInstanceIdError: member .* is in use by another live process; it will not retry or rejoin/,
      ),
    ]);
    const down = await health(app);
    const member = down.members.find((m) => m.streamPrefix === inUse)!;
    expect(member.problems).toEqual([expect.stringMatching(/^stopped for good: FencedInstanceIdError/)]);
    // Nothing in the process can repair it: liveness says so too (a restart gets a new generated id).
    const liveness = app.get(CoordinatorHealthIndicator).checkLiveness();
    expect(liveness.coordinator).toEqual({
      status: 'down',
      problems: [expect.stringMatching(/^member .* \(Listener.handle-m0@[^)]+\): stopped for good: FencedInstanceIdError/)],
    });
  });

  it('a running member that reports it through its error event is reported the same way, logged once', async () => {
    const streamPrefix = uniqueName('in-use-later');
    const errors: string[] = [];
    const app = await anApp([{ redis: { url: redis.server.url } }], [listener(streamPrefix)], {
      ...quiet,
      error: (message: unknown) => void errors.push(String(message)),
    });
    await pollUntil('health up', async () => (await health(app)).status === 'up');
    const [member] = app.get(CoordinatorRegistry).members();
    // What the core runtime emits when another live process takes this member id.
    const inUse = Object.assign(new Error('another live process has this member id'), { name: 'FencedInstanceIdError' });
    member.emit('error', inUse);
    member.emit('error', inUse);
    const down = await health(app);
    expect(down.status).toBe('down');
    expect(down.members[0].problems).toContain('stopped for good: FencedInstanceIdError: another live process has this member id');
    expect(errors).toHaveLength(1);
  });
});
