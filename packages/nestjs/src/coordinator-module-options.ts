import type { CoordinatedMemberOptions, CoordinatorOptions, PayloadCodec } from '@redis-stream-coordinator/core';
import type { Cluster, ClusterNode, ClusterOptions, Redis, RedisOptions } from 'ioredis';
import type { CoordinatorConsumerProperties } from './coordinator-consumer-properties';

/** A codec StreamPublisher writes with: a built-in one by name, or any `PayloadCodec` (its name is stored with each entry). */
export type PublisherCodec = 'json' | 'msgpack' | PayloadCodec;

/** Member options that can be set once for every member of the application. */
export type MemberDefaults = Partial<
  Omit<
    CoordinatedMemberOptions,
    'streamPrefix' | 'consumerGroup' | 'handler' | 'memberId' | 'memberInstanceId' | 'memberName' | 'coordinator'
  >
>;

export interface CoordinatorModuleOptions {
  /**
   * The Redis connection: a URL and/or ioredis options (passwords, ACL users, TLS; Sentinel with
   * `options.sentinels` and `options.name`), which the module connects and closes; a Redis Cluster
   * by its `cluster.nodes` (and ioredis `ClusterOptions`), likewise; or an existing `Redis` or
   * `Cluster` client, which the module uses and leaves open.
   */
  redis: { url?: string; options?: RedisOptions; cluster?: { nodes: ClusterNode[]; options?: ClusterOptions }; client?: Redis | Cluster };
  /** Coordinator settings (key prefix, heartbeat intervals, assignor), the same for every member. */
  coordinator?: CoordinatorOptions;
  /**
   * Defaults for every member, listeners and beans alike (session timeout, max attempts, workers…);
   * a listener or bean overrides them (docs/nestjs.md "Module defaults"). Options naming one member
   * or changing what a handler receives (`memberInstanceId`, `batch`…) are refused.
   */
  defaults?: MemberDefaults;
  /**
   * The module's StreamPublisher: `codec` its entries are written with unless a call names its own
   * (`'json'` (default), `'msgpack'` (needs the msgpackr package) or a custom `PayloadCodec`).
   */
  publisher?: { codec?: PublisherCodec };
  /** Bean-style consumers registered through module configuration (any payload type). */
  consumers?: CoordinatorConsumerProperties<never>[];
  /** How long to wait between attempts to start a member while Redis cannot be reached. Default 2000 ms. */
  startRetryDelayMs?: number;
  /** How long a health check waits for Redis to answer PING before it reports the connection down. Default 1000 ms. */
  healthCheckTimeoutMs?: number;
  /**
   * Whether the module logs its members' rebalances (shards assigned and given up, `log`), dead
   * letters, fences and lost leases (`warn`) through Nest's Logger, one line each, at most 20 of a
   * kind per 10 s then one summary line (docs/nestjs.md "Logs"). Default true.
   */
  logMemberEvents?: boolean;
}

/**
 * Options of `forRoot`/`forRootAsync` beside the module options (known before any factory runs).
 * `name` makes a named connection: its listeners and beans say `connection: name`, its
 * StreamPublisher and CoordinatorAdmin are injected with `@InjectStreamPublisher(name)` and
 * `@InjectCoordinatorAdmin(name)`. Without it the module is the unnamed (`'default'`) connection.
 */
export interface CoordinatorModuleExtras {
  isGlobal?: boolean;
  name?: string;
}
