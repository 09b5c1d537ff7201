import { checkOption, type CoordinatorOptions } from '@redis-stream-coordinator/core';
import type { CoordinatorModuleOptions, MemberDefaults } from '../coordinator-module-options';
import { mergeDeadLetter, workersOf } from '../member-defaults';

/**
 * What one `@EventPattern` / `@MessagePattern` stream runs with: from the pattern's extras
 * (`@EventPattern('orders', { consumerGroup: 'billing', concurrency: 2 })`), else the server's
 * `streams[prefix]`, else the server's own defaults.
 */
export type RedisStreamsPatternOptions = MemberDefaults & {
  /** The consumer group of the pattern's members. Required here or in the server's options. */
  consumerGroup?: string;
  /** Members (`<memberId>-m0` …) for this stream in this process, each running `runtimeMaxConcurrency` handlers. Default 1. */
  concurrency?: number;
  /** Base member id; a member's id is `<memberId>-m<i>`. Default: a new UUIDv7 per start of the process. */
  memberId?: string;
  /**
   * Static membership (docs/runtime.md): a stable name of this process's members of the stream,
   * `<memberInstanceId>-m0` …, so a restarted process takes their shards back without a rebalance.
   */
  memberInstanceId?: string;
  /** Base member name for people (describeGroup, dashboards). Default: the stream prefix. */
  memberName?: string;
};

/** Options of `new RedisStreamsServer(options)`. */
export interface RedisStreamsServerOptions extends RedisStreamsPatternOptions {
  /** The Redis connection: as `CoordinatorModule.forRoot`'s (`url`/`options`, which the server connects and closes, or an existing `client`, left open). */
  redis: CoordinatorModuleOptions['redis'];
  /** Coordinator settings (key prefix, heartbeat intervals, assignor), the same for every member of a group. */
  coordinator?: CoordinatorOptions;
  /** Per stream prefix: options that a pattern's extras override. */
  streams?: Record<string, RedisStreamsPatternOptions>;
  /** Wait between attempts to start a member while Redis cannot be reached. Default 2000 ms. */
  startRetryDelayMs?: number;
}

/**
 * Options of a server on a CoordinatorModule connection (`RedisStreamsServer.fromConnection`,
 * `RedisStreamsServerModule`): the connection gives `redis`, `coordinator` and `startRetryDelayMs`.
 */
export type RedisStreamsServerConnectionOptions = Omit<RedisStreamsServerOptions, 'redis' | 'coordinator' | 'startRetryDelayMs'>;

/** Keys of RedisStreamsPatternOptions that are not member options. */
const PATTERN_ONLY = new Set(['concurrency', 'redis', 'coordinator', 'streams', 'startRetryDelayMs']);

/**
 * A stream's options, most specific first: pattern extras, `streams[prefix]`, the server's options,
 * then `defaults` (the CoordinatorModule's, for a server built on its connection; `deadLetter`
 * merges field by field with them, as for listeners).
 */
export function resolvePatternOptions(
  prefix: string,
  extras: Record<string, unknown> | undefined,
  options: RedisStreamsServerOptions,
  defaults: MemberDefaults = {},
): { concurrency: number; memberOptions: RedisStreamsPatternOptions & { consumerGroup: string } } {
  const merged: Record<string, unknown> = {};
  for (const source of [defaults, options, options.streams?.[prefix], extras]) {
    for (const [name, value] of Object.entries(source ?? {})) {
      if (value !== undefined && !(source === options && PATTERN_ONLY.has(name))) merged[name] = value;
    }
  }
  const deadLetter = mergeDeadLetter(
    defaults.deadLetter,
    [extras, options.streams?.[prefix], options].find((level) => level?.deadLetter !== undefined)?.deadLetter,
  );
  if (deadLetter !== undefined) merged.deadLetter = deadLetter;
  const given = merged.concurrency ?? 1;
  delete merged.concurrency;
  const where = `RedisStreamsServer: pattern ${JSON.stringify(prefix)}`;
  // The most specific level that says anything about workers decides (member-defaults.ts), as for listeners.
  merged.runtimeMaxConcurrency = workersOf([
    extras as RedisStreamsPatternOptions | undefined,
    options.streams?.[prefix],
    options,
    defaults,
  ]);
  if (merged.batch !== undefined) {
    // A pattern handler gets one payload and its context per call; a batch would hand it an array.
    throw new TypeError(
      `${where}: batch is not supported by the microservices transport (a pattern handler gets one entry per call); use a @StreamListener or a bean consumer with batch`,
    );
  }
  const concurrency = checkOption('nestjs.concurrency', given, { label: `${where}: concurrency` });
  if (typeof merged.consumerGroup !== 'string' || merged.consumerGroup === '') {
    throw new TypeError(
      `${where}: consumerGroup is required (in the pattern's extras, streams[${JSON.stringify(prefix)}] or the server's options), got ${JSON.stringify(merged.consumerGroup)}`,
    );
  }
  return { concurrency, memberOptions: merged as RedisStreamsPatternOptions & { consumerGroup: string } };
}
