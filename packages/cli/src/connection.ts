import fs from 'node:fs';
import { Cluster, type ClusterNode, Redis, type RedisOptions } from 'ioredis';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';

/** The connection options every command takes (global options of `rsc`). */
export interface ConnectionOptions {
  url?: string;
  /** Redis Cluster nodes: comma-separated host:port or redis:// URLs (any few; the rest are discovered). */
  cluster?: string;
  password?: string;
  user?: string;
  tls?: boolean;
  tlsCa?: string;
  tlsInsecure?: boolean;
  keyPrefix?: string;
}

export const DEFAULT_URL = 'redis://127.0.0.1:6379';

/** The URL with its password hidden, for messages. */
export function safeUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, '//$1:***@');
}

/**
 * Connects as the options say (URL, then password, ACL user and TLS on top of it) and fails fast
 * with the address when Redis cannot be reached: an operator's command should not hang retrying.
 */
export async function connect(options: ConnectionOptions): Promise<{ redis: Redis | Cluster; admin: CoordinatorAdmin; url: string }> {
  const clusterList = options.cluster ?? process.env.REDIS_CLUSTER_NODES;
  if (clusterList !== undefined && options.url !== undefined) throw new UsageError('give --url or --cluster, not both');
  const url = clusterList ?? options.url ?? process.env.REDIS_URL ?? DEFAULT_URL;
  const nodes = clusterList === undefined ? undefined : parseClusterNodes(clusterList);
  if (!nodes && !/^rediss?:\/\//.test(url))
    throw new UsageError(`--url must be a redis:// or rediss:// URL, got ${JSON.stringify(safeUrl(url))}`);
  const redisOptions: RedisOptions = {
    lazyConnect: true,
    connectTimeout: 5000,
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => (times > 2 ? null : 200),
  };
  // A cluster's nodes share credentials: those of the first URL in --cluster that has any.
  const inList = clusterList
    ?.split(',')
    .map((item) => item.trim())
    .find((item) => /^rediss?:\/\/[^/]*@/.test(item));
  const listed = inList ? new URL(inList) : undefined;
  const password = options.password ?? process.env.REDIS_PASSWORD ?? (listed?.password ? decodeURIComponent(listed.password) : undefined);
  if (password !== undefined) redisOptions.password = password;
  const user = options.user ?? process.env.REDIS_USERNAME ?? (listed?.username ? decodeURIComponent(listed.username) : undefined);
  if (user !== undefined) redisOptions.username = user;
  if (options.tls || options.tlsCa || options.tlsInsecure || url.startsWith('rediss://') || url.includes(',rediss://')) {
    redisOptions.tls = {
      ...(options.tlsCa ? { ca: readCa(options.tlsCa) } : {}),
      ...(options.tlsInsecure ? { rejectUnauthorized: false } : {}),
    };
  }
  const redis = nodes
    ? new Cluster(nodes, {
        lazyConnect: true,
        redisOptions,
        // An operator's command fails fast when the cluster cannot be reached, like a single node.
        clusterRetryStrategy: (times) => (times > 2 ? null : 200),
      })
    : new Redis(url, redisOptions);
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => (lastError = error));
  try {
    await redis.connect();
  } catch (error) {
    redis.disconnect();
    throw new Error(`cannot connect to Redis at ${safeUrl(url)}: ${(lastError ?? (error as Error)).message}`);
  }
  return { redis, admin: new CoordinatorAdmin(redis, { keyPrefix: options.keyPrefix }), url };
}

/** `host:port` or `redis://[user:pass@]host:port` items, comma-separated (credentials are taken by `connect`). */
export function parseClusterNodes(list: string): ClusterNode[] {
  const items = list
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
  if (items.length === 0)
    throw new UsageError(`--cluster must list at least one node (host:port or redis:// URL), got ${JSON.stringify(list)}`);
  return items.map((item) => {
    if (/^rediss?:\/\//.test(item)) {
      let parsed: URL;
      try {
        parsed = new URL(item);
      } catch {
        throw new UsageError(`--cluster: ${JSON.stringify(safeUrl(item))} is not a valid URL`);
      }
      return { host: parsed.hostname, port: Number(parsed.port || 6379) };
    }
    const match = /^([^:\s]+):(\d{1,5})$/.exec(item);
    if (!match || Number(match[2]) > 65_535) throw new UsageError(`--cluster: ${JSON.stringify(item)} is not host:port or a redis:// URL`);
    return { host: match[1], port: Number(match[2]) };
  });
}

function readCa(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (error) {
    throw new UsageError(`--tls-ca ${file}: ${(error as Error).message}`);
  }
}

/** Bad input on the command line: exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}
