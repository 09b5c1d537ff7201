import { Cluster, Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { LOADING_RETRY_MS } from '@redis-stream-coordinator/core';
import { CoordinatorConnection } from '@redis-stream-coordinator/nestjs';
import { duplicateClient } from '../../packages/core/src/redis/connection/slot-pipelines';

// After a Redis restart with persistence, a connection made while Redis loads its data waits in
// ioredis's ready check for Redis's loading estimate (at least 1 s, up to maxLoadingRetryTime,
// default 10 s) before it asks again, holding every command: the soak's Redis-restart p99 of ~10 s
// (docs/reliability.md). The connections the library opens ask every LOADING_RETRY_MS.
const opened: (Redis | Cluster)[] = [];
afterEach(() => {
  for (const client of opened.splice(0)) client.disconnect();
});
const lazy = <T extends Redis | Cluster>(client: T): T => {
  opened.push(client);
  return client;
};

describe('asking whether a restarted Redis has loaded its data', () => {
  it('the connections a member opens from a client (reader, wake-ups) ask every 200 ms, or sooner when the client does', () => {
    const plain = lazy(new Redis({ lazyConnect: true, password: 'kept' }));
    const reader = lazy(duplicateClient(plain) as Redis);
    expect(LOADING_RETRY_MS).toBe(200);
    expect(reader.options.maxLoadingRetryTime).toBe(LOADING_RETRY_MS);
    expect(reader.options.password).toBe('kept');
    const eager = lazy(new Redis({ lazyConnect: true, maxLoadingRetryTime: 50 }));
    expect(lazy(duplicateClient(eager) as Redis).options.maxLoadingRetryTime).toBe(50);
    const cluster = lazy(new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, redisOptions: { username: 'u' } }));
    const clusterReader = lazy(duplicateClient(cluster) as Cluster);
    expect(clusterReader.options.redisOptions).toMatchObject({ username: 'u', maxLoadingRetryTime: LOADING_RETRY_MS });
  });

  it("the NestJS module's clients ask every 200 ms unless the application says otherwise", () => {
    const noop = () => undefined;
    const byUrl = CoordinatorConnection.fromOptions({ redis: { url: 'redis://127.0.0.1:1', options: { lazyConnect: true } } }, noop);
    opened.push(byUrl.client);
    expect((byUrl.client as Redis).options.maxLoadingRetryTime).toBe(LOADING_RETRY_MS);
    const own = CoordinatorConnection.fromOptions({ redis: { options: { lazyConnect: true, maxLoadingRetryTime: 5000 } } }, noop);
    opened.push(own.client);
    expect((own.client as Redis).options.maxLoadingRetryTime).toBe(5000);
    const cluster = CoordinatorConnection.fromOptions(
      { redis: { cluster: { nodes: [{ host: '127.0.0.1', port: 1 }], options: { lazyConnect: true } } } },
      noop,
    );
    opened.push(cluster.client);
    expect((cluster.client as Cluster).options.redisOptions?.maxLoadingRetryTime).toBe(LOADING_RETRY_MS);
  });
});
