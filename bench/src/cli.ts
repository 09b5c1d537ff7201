import os from 'node:os';
import { Redis } from 'ioredis';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { redisVersion } from './redis-stats';

/** Runs a benchmark entry point and exits: 0 when it finished, 1 (with the error) when it failed. */
export function runCli(main: () => Promise<void>): void {
  main().then(
    () => process.exit(0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
}

/** Polls `condition` every millisecond until it holds; fails after `timeoutMs` instead of hanging a run. */
export async function until(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('benchmark condition not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

/** Progress lines on stderr, each with the seconds since `started` (Date.now() when the run began). */
export function progressSince(started: number): (line: string) => void {
  return (line) => process.stderr.write(`[${Math.round((Date.now() - started) / 1000)} s] ${line}\n`);
}

/** The load average (1 / 5 / 15 min): a figure measured while it is above the cores says as much about the neighbours. */
export function loadAverage(): string {
  return os
    .loadavg()
    .map((n) => n.toFixed(1))
    .join(' / ');
}

/** Runs `body` against a private redis-server, given its URL and version; stops the server after. */
export async function withPrivateRedis(body: (url: string, version: string) => Promise<void>): Promise<void> {
  const server = await RedisServer.start();
  try {
    const client = new Redis(server.url);
    const version = await redisVersion(client);
    client.disconnect();
    await body(server.url, version);
  } finally {
    await server.stop();
  }
}
