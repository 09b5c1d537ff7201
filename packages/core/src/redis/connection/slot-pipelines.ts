import type { ChainableCommander, Cluster, ClusterOptions, RedisOptions } from 'ioredis';
import type { RedisClient } from '../scripts';
import { loadingRetryTime } from './connection-defaults';
import { keySlot } from './key-slot';
import { reconnectOnReadonly } from './readonly-reconnect';

/** One batch of commands whose keys all share one hash slot (e.g. one shard's keys). */
export interface SlotBatch {
  /** Adds the batch's commands to the pipeline. */
  build(pipeline: ChainableCommander): void;
}

/** A SlotBatch that names one of its keys: the slot (and so the node) it goes to. */
export interface NodeBatch extends SlotBatch {
  key: string;
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
const ASKED = /^ASK\b/;

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
    return client.duplicate({
      maxLoadingRetryTime: loadingRetryTime(maxLoadingRetryTime),
      reconnectOnError: reconnectOnError ?? reconnectOnReadonly,
      ...overrides,
    });
  }
  return duplicateCluster(client, overrides);
}

/** `duplicateClient` for a Cluster, with Cluster options of its own (e.g. `shardedSubscribers`). */
export function duplicateCluster(
  client: Cluster,
  overrides: RedisOptions = {},
  clusterOverrides: Omit<ClusterOptions, 'redisOptions'> = {},
): Cluster {
  const redisOptions = client.options.redisOptions ?? {};
  return client.duplicate([], {
    ...clusterOverrides,
    redisOptions: { ...redisOptions, maxLoadingRetryTime: loadingRetryTime(redisOptions.maxLoadingRetryTime), ...overrides },
  });
}

/**
 * Sends batches of commands: on a single Redis (or Sentinel) all in one pipeline, one round trip; on
 * a Cluster one pipeline per batch, all sent side by side. A Cluster pipeline must not span nodes,
 * and one that spans slots of one node breaks as soon as one of them moves; a pipeline of one slot
 * is routed by ioredis and follows MOVED and ASK as a whole. A batch that Redis answered only with
 * TRYAGAIN (a multi-key command on a slot whose keys are half-migrated: nothing ran) or CLUSTERDOWN
 * (a failover under way) is sent again after a pause, for up to about 2 s, then reported as it is.
 */
export async function execBySlot(
  client: RedisClient,
  batches: readonly SlotBatch[],
  options: ExecBySlotOptions = {},
): Promise<SlotBatchResult[]> {
  if (batches.length === 0) return [];
  if (!isCluster(client)) {
    const sent = await sendTogether(client.pipeline(), batches, options);
    if ('error' in sent) return batches.map(() => sent);
    return sent.parts.map((part) => ({ replies: part, tail: sent.tail }));
  }
  return Promise.all(batches.map((batch) => execOneSlot(client, batch, options)));
}

/**
 * `execBySlot`, with the batches of one node in one pipeline: on a Cluster, one write and one round
 * trip per node (by the client's slot table when sent), each batch's replies on their own. A batch
 * whose replies are all redirections (its slot moved, or is moving: MOVED, ASK) or TRYAGAIN/
 * CLUSTERDOWN is sent again alone (`execBySlot`'s way: ioredis follows the redirection, or it is
 * retried after a pause); the node's other batches keep their replies. ioredis itself resends a
 * node's pipeline only when every command in it failed with the same error (a closed connection,
 * CLUSTERDOWN), which is safe for any batch sent here: nothing of it ran. A slot whose node is not
 * known yet goes alone. With `tail`, it follows each node's batches once (e.g. one WAIT per node,
 * counting that node's replicas for all of them).
 */
export async function execByNode(
  client: RedisClient,
  batches: readonly NodeBatch[],
  options: ExecBySlotOptions = {},
): Promise<SlotBatchResult[]> {
  if (!isCluster(client) || batches.length <= 1) return execBySlot(client, batches, options);
  const byNode = new Map<string, number[]>();
  const results: Promise<void>[] = [];
  const out: SlotBatchResult[] = new Array(batches.length);
  batches.forEach((batch, i) => {
    const node = (client.slots[keySlot(batch.key)] as string[] | undefined)?.join(';');
    if (node === undefined) {
      results.push(execOneSlot(client, batch, options).then((result) => void (out[i] = result)));
      return;
    }
    const group = byNode.get(node);
    if (group) group.push(i);
    else byNode.set(node, [i]);
  });
  for (const indexes of byNode.values()) {
    results.push(
      execNodePipeline(
        client,
        indexes.map((i) => batches[i]),
        options,
      ).then((replies) => {
        for (const [j, at] of indexes.entries()) out[at] = replies[j];
      }),
    );
  }
  await Promise.all(results);
  return out;
}

/** One node's batches in one pipeline; redirected or transiently refused batches are sent again alone. */
async function execNodePipeline(client: Cluster, batches: readonly SlotBatch[], options: ExecBySlotOptions): Promise<SlotBatchResult[]> {
  if (batches.length === 1) return [await execOneSlot(client, batches[0], options)];
  const sent = await sendTogether(client.pipeline(), batches, options);
  if ('error' in sent) {
    // Refused before it was sent because the slot table changed between the grouping and the send
    // ("All keys in the pipeline should belong to the same slots allocation group"): nothing ran,
    // each batch goes alone. Any other failure is each batch's, as execBySlot reports it.
    if (/slots allocation group/.test(sent.error.message)) return Promise.all(batches.map((batch) => execOneSlot(client, batch, options)));
    return batches.map(() => sent);
  }
  const { parts, tail } = sent;
  return Promise.all(
    batches.map((batch, i) => {
      const own = parts[i];
      const moved =
        own.length > 0 && own.every(([error]) => error !== null && (REDIRECTED.test(error.message) || TRANSIENT.test(error.message)));
      if (!moved) return { replies: own, tail };
      if (own.some(([error]) => REDIRECTED.test(error!.message))) client.refreshSlotsCache();
      return execOneSlot(client, batch, options);
    }),
  );
}

async function execOneSlot(client: Cluster, batch: SlotBatch, options: ExecBySlotOptions): Promise<SlotBatchResult> {
  for (let attempt = 1; ; attempt++) {
    const sent = await sendTogether(client.pipeline(), [batch], options);
    if ('error' in sent) return sent;
    const {
      parts: [own],
      tail,
    } = sent;
    const asked = options.tail && own.length > 0 && own.every(([error]) => error !== null && ASKED.test(error.message));
    if (asked) return execAskedWithTail(client, batch, options.tail!, own[0][0]!.message.split(' ')[2]);
    const redirected = own.length > 0 && own.every(([error]) => error !== null && REDIRECTED.test(error.message));
    const transient = redirected || (own.length > 0 && own.every(([error]) => error !== null && TRANSIENT.test(error.message)));
    if (!transient || attempt >= TRANSIENT_ATTEMPTS) return { replies: own, tail };
    if (redirected) client.refreshSlotsCache();
    await new Promise((resolve) => setTimeout(resolve, TRANSIENT_DELAY_MS));
  }
}

/**
 * A batch with a tail that met ASK (its slot is moving, its keys are on the importing node already):
 * refreshing the slot table does not help (the slot is still the old node's), and ioredis follows
 * an ASK only for a pipeline without a tail. So the batch is sent again without it (ioredis sends
 * ASKING before each command to the node the ASK named, or follows a MOVED once the move is done),
 * then the tail on that node's connection of the same client: a WAIT there counts the replicas of
 * the writes just made on it. A tail that cannot be sent is reported as its replies' errors (a WAIT
 * not confirmed), never as success.
 */
async function execAskedWithTail(
  client: Cluster,
  batch: SlotBatch,
  tail: (pipeline: ChainableCommander) => void,
  address: string | undefined,
): Promise<SlotBatchResult> {
  const result = await execOneSlot(client, batch, {});
  if ('error' in result) return result;
  const node = client.nodes('all').find((n) => `${n.options.host}:${n.options.port}` === address);
  if (!node)
    return { replies: result.replies, tail: [[new Error(`no connection to ${address}, where the batch was sent after ASK`), undefined]] };
  const sent = await sendTogether(node.pipeline(), [], { tail });
  return { replies: result.replies, tail: 'error' in sent ? [[sent.error, undefined]] : sent.tail };
}

/**
 * Sends the batches (then the tail) in one pipeline: each batch's replies (padded to its command
 * count) and the tail's, or why the pipeline failed as a whole.
 */
async function sendTogether(
  pipeline: ChainableCommander,
  batches: readonly SlotBatch[],
  options: ExecBySlotOptions,
): Promise<{ parts: [Error | null, unknown][][]; tail: [Error | null, unknown][] } | { error: Error }> {
  const sizes = batches.map((batch) => {
    const before = pipeline.length;
    batch.build(pipeline);
    return pipeline.length - before;
  });
  options.tail?.(pipeline);
  let replies: [Error | null, unknown][];
  try {
    replies = padded(((await pipeline.exec()) ?? []) as [Error | null, unknown][], pipeline.length);
  } catch (error) {
    return { error: error as Error };
  }
  let offset = 0;
  const parts = sizes.map((size) => replies.slice(offset, (offset += size)));
  return { parts, tail: replies.slice(offset) };
}

function padded(replies: [Error | null, unknown][], size: number): [Error | null, unknown][] {
  while (replies.length < size) replies.push([new Error('no reply to the command'), undefined]);
  return replies;
}
