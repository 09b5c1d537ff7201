import { Cluster, type ClusterOptions, Redis, type RedisOptions } from 'ioredis';
import { afterAll, beforeAll } from 'vitest';
import { reconnectOnReadonly } from '@redis-stream-coordinator/core';
import { RedisCluster, RedisSentinel } from '@redis-stream-coordinator/core/testing';

export interface ClusterFixture {
  cluster: RedisCluster;
  /** A cluster client, disconnected after the file. */
  client(options?: ClusterOptions): Cluster;
}

/** Client options for tests that kill masters: retry through a failover instead of failing fast. */
export const FAILOVER_TOLERANT: ClusterOptions = {
  retryDelayOnFailover: 100,
  retryDelayOnClusterDown: 100,
  retryDelayOnTryAgain: 50,
  maxRedirections: 64,
  redisOptions: { maxRetriesPerRequest: 20 },
};

/**
 * Starts a private Redis Cluster (3 masters, 3 replicas) for the calling test file and stops it
 * (and every client made here) after the file, pass or fail.
 */
export function useRedisCluster(): ClusterFixture {
  const clients = new Set<Cluster>();
  const fixture: ClusterFixture = {
    cluster: undefined as unknown as RedisCluster,
    client(options = {}) {
      const client = new Cluster(fixture.cluster.startupNodes, { ...FAILOVER_TOLERANT, ...options });
      client.on('error', () => undefined);
      clients.add(client);
      return client;
    },
  };
  beforeAll(async () => {
    fixture.cluster = await RedisCluster.start();
  }, 60_000);
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await fixture.cluster?.stop();
  });
  return fixture;
}

export interface SentinelFixture {
  setup: RedisSentinel;
  /**
   * A client that finds the master through the Sentinels, disconnected after the file. It reconnects
   * on READONLY (`reconnectOnReadonly`), as docs/cluster.md tells applications to configure theirs;
   * `{ reconnectOnError: null }` makes one without.
   */
  client(options?: RedisOptions): Redis;
}

/** Starts a private Sentinel setup (1 master, 1 replica, 3 Sentinels) for the calling test file. */
export function useRedisSentinel(): SentinelFixture {
  const clients = new Set<Redis>();
  const fixture: SentinelFixture = {
    setup: undefined as unknown as RedisSentinel,
    client(options = {}) {
      const client = new Redis({
        sentinels: fixture.setup.sentinelNodes,
        name: fixture.setup.masterName,
        maxRetriesPerRequest: 20,
        sentinelRetryStrategy: () => 100,
        reconnectOnError: reconnectOnReadonly,
        ...options,
      });
      client.on('error', () => undefined);
      clients.add(client);
      return client;
    },
  };
  beforeAll(async () => {
    fixture.setup = await RedisSentinel.start();
  }, 60_000);
  afterAll(async () => {
    for (const client of clients) client.disconnect();
    await fixture.setup?.stop();
  });
  return fixture;
}
