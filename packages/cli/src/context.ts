import type { Command } from 'commander';
import type { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import type { Cluster, Redis } from 'ioredis';
import { connect, type ConnectionOptions } from './connection';
import { assertTargetsExist } from './targets';

export interface GlobalOptions extends ConnectionOptions {
  json?: boolean;
}

export interface CommandContext {
  admin: CoordinatorAdmin;
  redis: Redis | Cluster;
  json: boolean;
  /** Resolves when the user asks to stop (SIGINT/SIGTERM): --watch and --follow end on it. */
  stopped: Promise<void>;
  isStopped: () => boolean;
}

/**
 * Runs a command's body with a connection made from the global options, and always closes it, so
 * that the process ends when the body does.
 */
export async function withAdmin(command: Command, body: (context: CommandContext) => Promise<void>): Promise<void> {
  const options = command.optsWithGlobals<GlobalOptions>();
  const { redis, admin } = await connect(options);
  try {
    await assertTargetsExist(command, admin, redis, options.keyPrefix);
  } catch (error) {
    redis.disconnect();
    throw error;
  }
  let stop: () => void = () => {};
  let stoppedFlag = false;
  const stopped = new Promise<void>((resolve) => (stop = resolve));
  const onSignal = () => {
    stoppedFlag = true;
    stop();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await body({ admin, redis, json: options.json ?? false, stopped, isStopped: () => stoppedFlag });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    redis.disconnect();
  }
}

/** Waits `ms` or until the user stops, whichever is first. */
export function pause(context: CommandContext, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    void context.stopped.then(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}
