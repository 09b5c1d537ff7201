import type { ChainableCommander, Cluster, ClusterOptions, RedisOptions } from 'ioredis';
import type { RedisClient } from './scripts';
import { loadingRetryTime } from './connection-defaults';
import { reconnectOnReadonly } from './readonly-reconnect';

/** One batch of commands whose keys all share one hash slot (e.g. one shard's keys). */
export interface SlotBatch {
  /** Adds the batch's commands to the pipeline. */
  build(pipeline: ChainableCommander): void;
}

/**
 * Each batch's replies (and those of the `tail` commands sent after it), or why its pipeline failed
 * as a whole (e.g. the connection closed before it was sent).
 */
export type SlotBatchResult = { replies: [Error | null, unknown][]; tail: [Error | null, unknown][] } | { error: Error };

export interface ExecBySlotOptions {
  /**
   * Commands without keys sent once per pipeline after its batches, on the same connection (e.g.
   * `WAIT`, which counts the replicas that have this connection's writes): once on a single Redis,
   * once per batch on a Cluster. Each batch's result carries the tail replies of its pipeline.
   */
  tail?: (pipeline: ChainableCommander) => void;
}

/** Tries of a batch that Redis Cluster answered only with TRYAGAIN (a slot half-migrated) or CLUSTERDOWN. */
const TRANSIENT_ATTEMPTS = 40;
const TRANSIENT_DELAY_MS = 50;
const TRANSIENT = /^(TRYAGAIN|CLUSTERDOWN)\b/;
/**
 * With a tail, ioredis does not follow a redirection of the pipeline itself (it resends a pipeline
 * only when everything else in it was read-only, and WAIT is not): nothing of the batch ran, so it
 * is sent again after the slot table is refreshed.
 */
const REDIRECTED = /^(MOVED|ASK)\b/;

export function isCluster(client: RedisClient): client is Cluster {
  return (client as { isCluster?: boolean }).isCluster === true;
}

/**
 * Another connection with the same options (password, ACL user, TLS, Sentinel or Cluster nodes):
 * `Redis.duplicate(options)` and `Cluster.duplicate(nodes, options)` differ, and a Cluster's
 * per-node options sit under `redisOptions`. It asks every LOADING_RETRY_MS whether a restarted
 * Redis has loaded its data (connection-defaults.ts). A single-node connection (Sentinel or not)
 * reconnects when Redis answers READONLY unless the client's own `reconnectOnError` decides
 * (readonly-reconnect.ts): left on a demoted master, it would have every write refused; a Cluster
 * node answers MOVED instead, so its connections are left as they are.
 */
export function duplicateClient(client: RedisClient, overrides: RedisOptions = {}): RedisClient {
  if (!isCluster(client)) {
    const { maxLoadingRetryTime, reconnectOnError } = client.options;
    return client.duplicate({ maxLoadingRetryTime: loadingRetryTime(maxLoadingRetryTime), reconnectOnError: reconnectOnError ?? reconnectOnReadonly, ...overrides });
  }
  return duplicateCluster(client, overrides);
}

/** `duplicateClient` for a Cluster, with Cluster options of its own (e.g. `shardedSubscribers`). */
export function duplicateCluster(client: Cluster, overrides: RedisOptions = {}, clusterOverrides: Omit<ClusterOptions, 'redisOptions'> = {}): Cluster {
  const redisOptions = client.options.redisOptions ?? {};
  return client.duplicate([], { ...clusterOverrides, redisOptions: { ...redisOptions, maxLoadingRetryTime: loadingRetryTime(redisOptions.maxLoadingRetryTime), ...overrides } });
}

/**
 * Sends batches of commands: on a single Redis (or Sentinel) all in one pipeline, one round trip; on
 * a Cluster one pipeline per batch, all sent side by side. A Cluster pipeline must not span nodes,
 * and one that spans slots of one node breaks as soon as one of them moves; a pipeline of one slot
 * is routed by ioredis and follows MOVED and ASK as a whole. A batch that Redis answered only with
 * TRYAGAIN (a multi-key command on a slot whose keys are half-migrated: nothing ran) or CLUSTERDOWN
 * (a failover under way) is sent again after a pause, for up to about 2 s, then reported as it is.
 */
export async function execBySlot(client: RedisClient, batches: readonly SlotBatch[], options: ExecBySlotOptions = {}): Promise<SlotBatchResult[]> {
  if (batches.length === 0) return [];
  if (!isCluster(client)) {
    const pipeline = client.pipeline();
    const sizes = batches.map((batch) => {
      const before = pipeline.length;
      batch.build(pipeline);
      return pipeline.length - before;
    });
    options.tail?.(pipeline);
    let replies: [Error | null, unknown][];
    try {
      replies = ((await pipeline.exec()) ?? []) as [Error | null, unknown][];
    } catch (error) {
      return batches.map(() => ({ error: error as Error }));
    }
    let offset = 0;
    const parts = sizes.map((size) => {
      const part = replies.slice(offset, offset + size);
      offset += size;
      return padded(part, size);
    });
    const tail = padded(replies.slice(offset), pipeline.length - offset);
    return parts.map((part) => ({ replies: part, tail }));
  }
  return Promise.all(batches.map((batch) => execOneSlot(client, batch, options)));
}

async function execOneSlot(client: Cluster, batch: SlotBatch, options: ExecBySlotOptions): Promise<SlotBatchResult> {
  for (let attempt = 1; ; attempt++) {
    const pipeline = client.pipeline();
    batch.build(pipeline);
    const size = pipeline.length;
    options.tail?.(pipeline);
    let replies: [Error | null, unknown][];
    try {
      replies = padded(((await pipeline.exec()) ?? []) as [Error | null, unknown][], pipeline.length);
    } catch (error) {
      return { error: error as Error };
    }
    const own = replies.slice(0, size);
    const redirected = own.length > 0 && own.every(([error]) => error !== null && REDIRECTED.test(error.message));
    const transient = redirected || (own.length > 0 && own.every(([error]) => error !== null && TRANSIENT.test(error.message)));
    if (!transient || attempt >= TRANSIENT_ATTEMPTS) return { replies: own, tail: replies.slice(size) };
    if (redirected) client.refreshSlotsCache();
    await new Promise((resolve) => setTimeout(resolve, TRANSIENT_DELAY_MS));
  }
}

function padded(replies: [Error | null, unknown][], size: number): [Error | null, unknown][] {
  while (replies.length < size) replies.push([new Error('no reply to the command'), undefined]);
  return replies;
}
