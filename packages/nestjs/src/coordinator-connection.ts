import { Cluster, Redis } from 'ioredis';
import { type CoordinatedMember, checkOption, LOADING_RETRY_MS, reconnectOnReadonly } from '@redis-stream-coordinator/core';
import { DEFAULT_CONNECTION_NAME } from './coordinator.constants';
import type { CoordinatorModuleOptions } from './coordinator-module-options';
import { assertMemberDefaults } from './member-defaults';

/** What a PING of the connection found: how long it took, or why there was no PONG. */
export type PingResult = { ok: true; latencyMs: number } | { ok: false; error: string };

const DEFAULT_HEALTH_CHECK_TIMEOUT_MS = 1000;

/**
 * A member that runs on a connection outside CoordinatorModule's registry (the members of a
 * RedisStreamsServer built from it), as the health indicator reports it.
 */
export interface ConnectionMember {
  member: CoordinatedMember;
  /** What runs it, in place of a listener container's id (`transport:<pattern>`). */
  listenerId: string;
  /** Why it stopped for good (another live process has its member id), if it did. */
  fatalError?: string;
}

/**
 * One `CoordinatorModule.forRoot`: its name, its options, its Redis client, and whether the module
 * created that client (then it also closes it).
 */
export class CoordinatorConnection {
  /** The PING in flight, shared by concurrent health checks so a hung Redis does not pile them up. */
  private pendingPing: Promise<number> | undefined;
  /** What runs on this connection and must close before it (a client's inbox is deleted through it). */
  private readonly dependents = new Set<() => Promise<void>>();
  /** Who runs members on this connection besides the module (a transport server), for health checks. */
  private readonly memberSources = new Set<() => readonly ConnectionMember[]>();

  private constructor(
    readonly client: Redis | Cluster,
    readonly owned: boolean,
    readonly name: string,
    readonly options: CoordinatorModuleOptions,
  ) {}

  static fromOptions(
    options: CoordinatorModuleOptions,
    onError: (error: Error) => void,
    name = DEFAULT_CONNECTION_NAME,
  ): CoordinatorConnection {
    const redis = options?.redis;
    if (!redis || typeof redis !== 'object' || (!redis.url && !redis.options && !redis.client && !redis.cluster)) {
      throw new Error('CoordinatorModule: the "redis" option is required: give redis.url, redis.options, redis.cluster or redis.client');
    }
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`CoordinatorModule: name must be a non-empty string, got ${JSON.stringify(name)}`);
    }
    assertMemberDefaults(options.defaults, 'CoordinatorModule');
    assertNoIoredisKeyPrefix(redis);
    for (const option of ['startRetryDelayMs', 'healthCheckTimeoutMs'] as const) {
      const value = options[option];
      if (value !== undefined) checkOption(`nestjs.${option}`, value, { label: `CoordinatorModule: ${option}` });
    }
    if (options.logMemberEvents !== undefined && typeof options.logMemberEvents !== 'boolean') {
      throw new TypeError(`CoordinatorModule: logMemberEvents must be a boolean, got ${JSON.stringify(options.logMemberEvents)}`);
    }
    if (redis.client) return new CoordinatorConnection(redis.client, false, name, options);
    if (redis.url !== undefined && typeof redis.url !== 'string') {
      throw new TypeError(`CoordinatorModule: redis.url must be a string, got ${typeof redis.url}`);
    }
    if (redis.cluster !== undefined) {
      const nodes = redis.cluster?.nodes;
      if (!Array.isArray(nodes) || nodes.length === 0) {
        throw new TypeError(
          `CoordinatorModule: redis.cluster.nodes must be a non-empty array of cluster nodes, got ${JSON.stringify(nodes)}`,
        );
      }
      if (redis.url !== undefined) throw new TypeError('CoordinatorModule: give redis.url or redis.cluster, not both');
      const clusterOptions = redis.cluster.options ?? {};
      // A restarted node's clients ask every 200 ms whether it has loaded its data (not after up to 10 s).
      const cluster = new Cluster(nodes, {
        ...clusterOptions,
        redisOptions: { maxLoadingRetryTime: LOADING_RETRY_MS, ...clusterOptions.redisOptions },
      });
      cluster.on('error', onError);
      return new CoordinatorConnection(cluster, true, name, options);
    }
    // After a Redis restart, ask every 200 ms whether it has loaded its data, not after up to 10 s
    // (ioredis's default; LOADING_RETRY_MS in core). On a READONLY reply (the connection is on a
    // master that became a replica: Redis keeps it open), reconnect, which asks the Sentinels for
    // the master again. The application's own settings win.
    const clientOptions = { maxLoadingRetryTime: LOADING_RETRY_MS, reconnectOnError: reconnectOnReadonly, ...redis.options };
    const client = redis.url ? new Redis(redis.url, clientOptions) : new Redis(clientOptions);
    client.on('error', onError); // ioredis reconnects by itself; the error is logged, never thrown
    return new CoordinatorConnection(client, true, name, options);
  }

  /**
   * Shows the members `source` runs on this connection to the health indicator (the members of a
   * RedisStreamsServer built from it, which the module's registry does not hold).
   */
  reportMembers(source: () => readonly ConnectionMember[]): void {
    this.memberSources.add(source);
  }

  /** The members reported with `reportMembers`, as they are now. */
  reportedMembers(): ConnectionMember[] {
    return [...this.memberSources].flatMap((source) => source());
  }

  /** How long a health check waits for PONG (`healthCheckTimeoutMs`, default 1000 ms). */
  get healthCheckTimeoutMs(): number {
    return this.options.healthCheckTimeoutMs ?? DEFAULT_HEALTH_CHECK_TIMEOUT_MS;
  }

  /**
   * PING with a deadline. At most one PING per connection is in flight, shared by concurrent and
   * later checks until it settles: while Redis is down or hung, checks every few seconds queue
   * nothing more in ioredis (its offline queue would otherwise grow by one PING per check). A client
   * still connecting gets the deadline to connect; past it, the reason says it is not connected.
   */
  async ping(timeoutMs = this.healthCheckTimeoutMs): Promise<PingResult> {
    if (!this.pendingPing) {
      const started = Date.now();
      const ping = this.client.ping().then(() => Date.now() - started);
      this.pendingPing = ping;
      void ping
        .catch(() => undefined)
        .finally(() => {
          if (this.pendingPing === ping) this.pendingPing = undefined;
        });
    }
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<PingResult>((resolve) => {
      timer = setTimeout(() => {
        const status = this.client.status;
        const connection = status === 'ready' ? '' : `not connected (ioredis status "${status}"): `;
        resolve({ ok: false, error: `${connection}no reply to PING within ${timeoutMs} ms` });
      }, timeoutMs);
    });
    try {
      return await Promise.race([this.pendingPing.then((latencyMs): PingResult => ({ ok: true, latencyMs })), deadline]).catch(
        (error: Error): PingResult => ({ ok: false, error: `PING failed: ${error.message}` }),
      );
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Has `close` run before this connection closes: a transport client on the module's connection
   * deletes its reply inbox through it, which it could not do once the connection is gone.
   */
  closeFirst(close: () => Promise<void>): void {
    this.dependents.add(close);
  }

  async close(): Promise<void> {
    const dependents = [...this.dependents];
    this.dependents.clear();
    await Promise.all(dependents.map((close) => close().catch(() => undefined)));
    if (!this.owned) return;
    // QUIT would wait in the offline queue while Redis is unreachable: then just drop the socket.
    if (this.client.status !== 'ready') {
      this.client.disconnect();
      return;
    }
    await Promise.race([this.client.quit(), new Promise((resolve) => setTimeout(resolve, 2000))]).catch(() => undefined);
    this.client.disconnect();
  }
}

/**
 * ioredis's own `keyPrefix` prefixes the keys of most commands but not what SCAN returns nor pub/sub
 * channels, so the library would find some of its keys and miss others (stream inventories, shard
 * wake-ups). Refused, wherever it is set, for `coordinator.keyPrefix`, which every key the library
 * writes starts with.
 */
function assertNoIoredisKeyPrefix(redis: CoordinatorModuleOptions['redis']): void {
  const found: [string, unknown][] = [
    ['redis.options.keyPrefix', redis.options?.keyPrefix],
    ['redis.cluster.options.keyPrefix', redis.cluster?.options?.keyPrefix],
    ['redis.cluster.options.redisOptions.keyPrefix', redis.cluster?.options?.redisOptions?.keyPrefix],
    ['the keyPrefix of redis.client', (redis.client as { options?: { keyPrefix?: unknown } } | undefined)?.options?.keyPrefix],
  ];
  for (const [where, keyPrefix] of found) {
    if (keyPrefix !== undefined && keyPrefix !== '') {
      throw new TypeError(
        `CoordinatorModule: ${where} (${JSON.stringify(keyPrefix)}) is not supported: ioredis would prefix some of the library's keys and not others (SCAN results, pub/sub channels); use coordinator.keyPrefix, which every key of the library starts with`,
      );
    }
  }
}
