import type { Command } from 'commander';
import type { CoordinatorAdmin } from '@redis-stream-coordinator/core';
import type { Cluster, Redis } from 'ioredis';
import { connect, type ConnectionOptions } from './connection';
import type { RscIo } from './io';
import { type Printer, printerTo } from './output';
import { assertTargetsExist } from './targets';

export interface GlobalOptions extends ConnectionOptions {
  json?: boolean;
}

export interface CommandContext {
  admin: CoordinatorAdmin;
  redis: Redis | Cluster;
  json: boolean;
  /** Where results go (the run's standard output). */
  out: Printer;
  /** Resolves when the user asks to stop (SIGINT/SIGTERM): --watch and --follow end on it. */
  stopped: Promise<void>;
  isStopped: () => boolean;
}

/**
 * Runs a command's body with a connection made from the global options, and always closes it, so
 * that the process ends when the body does. `io`: the run's output and environment.
 */
export async function withAdmin(command: Command, io: RscIo, body: (context: CommandContext) => Promise<void>): Promise<void> {
  const options = command.optsWithGlobals<GlobalOptions>();
  const { redis, admin } = await connect(options, io.env);
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
    await body({ admin, redis, json: options.json ?? false, out: printerTo(io.stdout), stopped, isStopped: () => stoppedFlag });
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
