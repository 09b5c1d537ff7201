import fs from 'node:fs';
import { Cluster, type ClusterNode, Redis, type RedisOptions } from 'ioredis';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import { env } from './environment';
import type { RscIo } from './io';
import { redactUrl, redactUrlList } from './redact';

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

/**
 * Connects as the options say (URL, then password, ACL user and TLS on top of it) and fails fast
 * with the address when Redis cannot be reached: an operator's command should not hang retrying.
 * The environment variables are read from `environment` (the run's: RscIo.env).
 */
export async function connect(
  options: ConnectionOptions,
  environment: RscIo['env'] = process.env,
): Promise<{ redis: Redis | Cluster; admin: CoordinatorAdmin }> {
  const clusterList = options.cluster ?? env('REDIS_CLUSTER_NODES', environment);
  if (clusterList !== undefined && options.url !== undefined) throw new UsageError('give --url or --cluster, not both');
  const url = clusterList ?? options.url ?? env('REDIS_URL', environment) ?? DEFAULT_URL;
  const shown = clusterList === undefined ? redactUrl(url) : redactUrlList(clusterList);
  const nodes = clusterList === undefined ? undefined : parseClusterNodes(clusterList);
  if (!nodes && !/^rediss?:\/\//.test(url)) throw new UsageError(`--url must be a redis:// or rediss:// URL, got ${JSON.stringify(shown)}`);
  const redisOptions: RedisOptions = {
    lazyConnect: true,
    connectTimeout: 5000,
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => (times > 2 ? null : 200),
  };
  // Credentials are taken out of the URL here (a password may hold '/', which the URL parsers
  // read as the end of the host); a cluster's nodes share those of the first URL in --cluster that has any.
  const listed = (clusterList?.split(',') ?? [url])
    .map((item) => splitCredentials(item.trim()))
    .find((item) => item.username !== undefined || item.password !== undefined);
  const password = options.password ?? env('REDIS_PASSWORD', environment) ?? listed?.password;
  if (password !== undefined) redisOptions.password = password;
  const user = options.user ?? env('REDIS_USERNAME', environment) ?? listed?.username;
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
    : new Redis(splitCredentials(url).bare, redisOptions);
  let lastError: Error | undefined;
  redis.on('error', (error: Error) => (lastError = error));
  try {
    await redis.connect();
  } catch (error) {
    redis.disconnect();
    throw new Error(`cannot connect to Redis at ${shown}: ${(lastError ?? (error as Error)).message}`);
  }
  return { redis, admin: new CoordinatorAdmin(redis, { keyPrefix: options.keyPrefix }) };
}

/**
 * A redis:// URL's user and password, and the URL without them. The userinfo ends at the last `@`
 * (as in redactUrl): a password may hold `@`, `:` and `/`. Percent-encoded parts are decoded.
 */
export function splitCredentials(url: string): { bare: string; username?: string; password?: string } {
  const scheme = /^rediss?:\/\//.exec(url)?.[0];
  const at = url.lastIndexOf('@');
  if (!scheme || at < scheme.length) return { bare: url };
  const userinfo = url.slice(scheme.length, at);
  // As ioredis reads a URL: without a ':' the userinfo is a user name.
  const colon = userinfo.indexOf(':');
  const username = colon < 0 ? userinfo : userinfo.slice(0, colon);
  const password = colon < 0 ? '' : userinfo.slice(colon + 1);
  return {
    bare: `${scheme}${url.slice(at + 1)}`,
    ...(username !== '' ? { username: decoded(username) } : {}),
    ...(password !== '' ? { password: decoded(password) } : {}),
  };
}

function decoded(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part; // a literal '%' in a password
  }
}

/** `host:port` or `redis://[user:pass@]host:port` items, comma-separated (credentials are taken by `connect`). */
export function parseClusterNodes(list: string): ClusterNode[] {
  const items = list
    .split(',')
    .map((item) => item.trim())
    .filter((item) => item !== '');
  if (items.length === 0)
    throw new UsageError(`--cluster must list at least one node (host:port or redis:// URL), got ${JSON.stringify(redactUrlList(list))}`);
  return items.map((item) => {
    if (/^rediss?:\/\//.test(item)) {
      let parsed: URL;
      try {
        parsed = new URL(splitCredentials(item).bare);
      } catch {
        throw new UsageError(`--cluster: ${JSON.stringify(redactUrl(item))} is not a valid URL`);
      }
      return { host: parsed.hostname, port: Number(parsed.port || 6379) };
    }
    const match = /^([^:\s]+):(\d{1,5})$/.exec(item);
    if (!match || Number(match[2]) > 65_535)
      throw new UsageError(`--cluster: ${JSON.stringify(redactUrl(item))} is not host:port or a redis:// URL`);
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
