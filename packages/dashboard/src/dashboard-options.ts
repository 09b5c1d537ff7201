import type { IncomingMessage } from 'node:http';
import { checkOption, type CoordinatorOptions, type RedisClient } from '@redis-stream-coordinator/core';

/** What a request wants: to look (`read`: pages, data, the live stream) or to change something (`write`: an action). */
export type DashboardAccess = 'read' | 'write';

/**
 * The application's say on each request, before the dashboard does anything: true lets it through,
 * false answers 403. It gets the raw Node request (cookies, headers, `request.socket`), so it works
 * under Express, Fastify or a bare `http.Server`. A guard that throws answers 500 and is reported.
 *
 * @example
 * const guard: DashboardGuard = (request, access) => access === 'read' || isAdmin(request.headers.authorization);
 */
export type DashboardGuard = (request: IncomingMessage, access: DashboardAccess) => boolean | Promise<boolean>;

/** A listener of the application as the dashboard shows it (Nest: a StreamListenerRegistry container). */
export interface DashboardListener {
  id: string;
  kind: string;
  streamPrefix?: string;
  consumerGroup?: string;
  running: boolean;
  paused: boolean;
  concurrency: number;
}

/** The application's listeners, to show and (unless read-only) to pause and resume. */
export interface DashboardListeners {
  list(): DashboardListener[];
  pause(id: string): void;
  resume(id: string): void;
}

/**
 * A member running in this process, for its handler rate (what Redis does not store): anything with
 * a `memberId` and the `acknowledged` event of `CoordinatedMember`.
 */
export interface DashboardLocalMember {
  readonly memberId: string;
  on(event: 'acknowledged', listener: (event: { ids: string[]; accepted: boolean }) => void): unknown;
}

export interface DashboardOptions {
  /** The Redis client to read with (non-blocking commands only: the application's client is fine). */
  redis: RedisClient;
  /** The coordinator's options (its `keyPrefix`; resizes log with its `eventLogMaxLen`). */
  coordinator?: CoordinatorOptions;
  /** Where the page lives: `/rsc` by default. Every request under it is the dashboard's. */
  path?: string;
  /** True by default: every action (pause, resume, replay, purge, resize) is refused with 403. */
  readOnly?: boolean;
  /** Asked before every request (see DashboardGuard). Required when `readOnly` is false. */
  guard?: DashboardGuard;
  /** The application's listeners (pause/resume). */
  listeners?: DashboardListeners;
  /** Members running in this process, for their handler rate; read again on every refresh. */
  members?: () => Iterable<DashboardLocalMember>;
  /**
   * How often a watched group is read from Redis (describeGroup, its shards' positions, the time):
   * once per interval however many browsers watch it. Default 2000 ms, 500 to 60000. The event log is
   * checked twice per interval, and a new event brings the next read forward.
   */
  refreshMs?: number;
}

export interface ResolvedDashboardOptions {
  redis: RedisClient;
  coordinator: CoordinatorOptions;
  path: string;
  readOnly: boolean;
  guard: DashboardGuard | undefined;
  listeners: DashboardListeners | undefined;
  members: () => Iterable<DashboardLocalMember>;
  refreshMs: number;
}

/**
 * How long the dashboard waits for Redis before it says so: a watch calls its view stale, a request
 * is answered 504 (SPEC 10.1). Three refreshes, at least 5 s.
 */
export function redisLateAfterMs(refreshMs: number): number {
  return Math.max(5000, refreshMs * 3);
}

const PATH_PATTERN = /^(\/[A-Za-z0-9._~-]+)+$/;

/** Checks the options, each bad one an error naming it and its value. */
export function resolveDashboardOptions(options: DashboardOptions): ResolvedDashboardOptions {
  if (options === null || typeof options !== 'object') throw new TypeError('dashboard: options must be an object');
  const { redis, path = '/rsc', readOnly = true, guard, listeners, members, refreshMs = 2000, coordinator = {} } = options;
  if (!redis || typeof (redis as { xrange?: unknown }).xrange !== 'function') {
    throw new TypeError('dashboard: redis must be an ioredis client (Redis or Cluster)');
  }
  if (typeof path !== 'string' || !PATH_PATTERN.test(path)) {
    throw new RangeError(
      `dashboard: path must look like /rsc or /admin/streams (segments of A-Z a-z 0-9 . _ ~ -, no trailing slash), got ${JSON.stringify(path)}`,
    );
  }
  if (typeof readOnly !== 'boolean') throw new TypeError(`dashboard: readOnly must be a boolean, got ${JSON.stringify(readOnly)}`);
  if (guard !== undefined && typeof guard !== 'function')
    throw new TypeError(`dashboard: guard must be a function (request, access) => boolean, got ${typeof guard}`);
  // Actions change production state: never without the application saying who may do them.
  if (!readOnly && guard === undefined) {
    throw new Error(
      'dashboard: readOnly: false needs a guard: give guard: (request, access) => boolean, which decides who may pause, resume, replay, purge and resize',
    );
  }
  if (
    listeners !== undefined &&
    (typeof listeners?.list !== 'function' || typeof listeners.pause !== 'function' || typeof listeners.resume !== 'function')
  ) {
    throw new TypeError('dashboard: listeners must have list(), pause(id) and resume(id)');
  }
  if (members !== undefined && typeof members !== 'function')
    throw new TypeError(`dashboard: members must be a function returning the local members, got ${typeof members}`);
  checkOption('dashboard.refreshMs', refreshMs, { label: 'dashboard: refreshMs' });
  return { redis, coordinator, path, readOnly, guard, listeners, members: members ?? (() => []), refreshMs };
}
