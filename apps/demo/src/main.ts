/**
 * The demo: a summary pipeline you can run and watch.
 *
 *   npm run demo                                    # starts (and stops) a private redis-server
 *   REDIS_URL=redis://127.0.0.1:6379 npm run demo   # or uses yours
 *   DEMO_RATE=200 npm run demo                      # with a generator of 200 summaries/s
 *
 * Then: curl -X POST localhost:3000/summaries -H 'content-type: application/json' -d '{"userId":"u1","text":"hi"}'
 *       curl localhost:3000/group
 *       curl localhost:3000/metrics                 # Prometheus: docs/observability.md
 * A second process (PORT=3001 REDIS_URL=<the first one's> npm run demo) joins both groups: watch
 * GET /group move half the shards to it, and back when you stop it.
 *
 * It stops as a whole on SIGINT/SIGTERM, and exits with code 1 when the redis-server it started
 * dies (see DemoLifecycle).
 */
import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { env } from './environment';
import { DemoLifecycle } from './lifecycle';
import { registerMetrics } from './metrics';

/** DEMO_SHUTDOWN_TIMEOUT_MS: how long a shutdown may take before the demo exits anyway (default 15000). */
function shutdownTimeoutMs(): number {
  const raw = env('DEMO_SHUTDOWN_TIMEOUT_MS') ?? '15000';
  const value = Number(raw);
  if (!Number.isInteger(value) || value < 1)
    throw new RangeError(`DEMO_SHUTDOWN_TIMEOUT_MS must be a positive integer of milliseconds, got ${JSON.stringify(raw)}`);
  return value;
}

async function main(): Promise<void> {
  const logger = new Logger('Demo');
  const timeoutMs = shutdownTimeoutMs();
  let privateServer: RedisServer | undefined;
  if (env('REDIS_URL') === undefined) {
    privateServer = await RedisServer.start();
    process.env.REDIS_URL = privateServer.url;
    logger.log(
      `started a private redis-server (pid ${privateServer.pid}): REDIS_URL=${privateServer.url} (a second demo process can join with it)`,
    );
  }
  // The module reads REDIS_URL when it is loaded, so load it after the URL is known. The demo
  // handles SIGINT/SIGTERM itself (rather than enableShutdownHooks) to stop its redis-server last.
  registerMetrics();
  const { AppModule } = await import('./app.module');
  const app = await NestFactory.create(AppModule);
  new DemoLifecycle(app, privateServer, logger, timeoutMs).watch();
  await app.listen(Number(env('PORT') ?? 3000));
  const { port } = app.getHttpServer().address() as { port: number };
  logger.log(
    `listening on http://localhost:${port}: POST /summaries, GET /group, GET /metrics, GET /health/ready, GET /health/live, the dashboard at /rsc/`,
  );
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
