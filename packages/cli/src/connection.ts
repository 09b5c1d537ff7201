import fs from 'node:fs';
import { Redis, type RedisOptions } from 'ioredis';
import { CoordinatorAdmin } from '@redis-stream-coordinator/core';

/** The connection options every command takes (global options of `rsc`). */
export interface ConnectionOptions {
  url?: string;
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
export async function connect(options: ConnectionOptions): Promise<{ redis: Redis; admin: CoordinatorAdmin; url: string }> {
  const url = options.url ?? process.env.REDIS_URL ?? DEFAULT_URL;
  if (!/^rediss?:\/\//.test(url)) throw new UsageError(`--url must be a redis:// or rediss:// URL, got ${JSON.stringify(safeUrl(url))}`);
  const redisOptions: RedisOptions = {
    lazyConnect: true,
    connectTimeout: 5000,
    maxRetriesPerRequest: 1,
    retryStrategy: (times) => (times > 2 ? null : 200),
  };
  const password = options.password ?? process.env.REDIS_PASSWORD;
  if (password !== undefined) redisOptions.password = password;
  const user = options.user ?? process.env.REDIS_USERNAME;
  if (user !== undefined) redisOptions.username = user;
  if (options.tls || options.tlsCa || options.tlsInsecure || url.startsWith('rediss://')) {
    redisOptions.tls = {
      ...(options.tlsCa ? { ca: readCa(options.tlsCa) } : {}),
      ...(options.tlsInsecure ? { rejectUnauthorized: false } : {}),
    };
  }
  const redis = new Redis(url, redisOptions);
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
