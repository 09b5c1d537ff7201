import { v7 as uuidv7 } from 'uuid';
import { assertCodec } from '../protocol/codecs';
import { encodeEntry, jsonCodec, type OutgoingMessage, type PayloadCodec } from '../protocol/entry-format';
import { ShardCountConflictError, StreamNotFoundError } from '../protocol/errors';
import { assertIntegerInRange, assertStreamPrefix } from '../protocol/names';
import { appendToShards, type ShardAppend } from './entry-writer';
import { assertReplicaWait, type ReplicaWait } from '../redis/connection/replica-wait';
import { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';
import { execBySlot, isCluster } from '../redis/connection/slot-pipelines';
import { createStreamMetadata, ensureStreamRouting } from '../redis/stream-metadata';
import { ProducerTelemetry } from '../telemetry/producer-telemetry';
import { shardForKey } from './key-hash';
import { type FailedEntry, PartialBatchError, type SendResult, type WrittenEntry } from './send-results';

const ROUTE_CACHE_SIZE = 10_000;
/** Write rounds per batch: the first, plus re-routes after a shard refused the routed count (or had no marker). */
const MAX_ROUNDS = 4;
const MAX_SHARD_COUNT = 65_536;

export interface StreamProducerOptions {
  streamPrefix: string;
  /** Key prefix of the coordinator keys. Default `rsc`. */
  keyPrefix?: string;
  /**
   * Payload codec. Default JSON. Its name is stored with each entry, so members decode it with the
   * same codec whatever their own default (`json` and `msgpack` are built in; see the member's `codecs`).
   */
  codec?: PayloadCodec;
  /**
   * Approximate cap per shard stream (`XADD MAXLEN ~`). Default: no trimming.
   *
   * **Trimming loses data.** Redis trims by length only: it deletes the oldest entries whether or
   * not every consumer group has read and acknowledged them. An entry trimmed while unread is never
   * handled; one trimmed while pending is dropped from its group's pending list when claimed. Use it
   * only for streams where losing the oldest entries under backlog is acceptable, with a cap far
   * above the largest backlog you expect.
   */
  maxLenApprox?: number;
  /**
   * How often the producer re-reads the stream's shard metadata, so that it follows `resizeShards`
   * without a restart. Default 500 ms. Writes made with an outdated count are refused by the shard
   * and re-routed (docs/resharding.md), so this only sets how often that extra round trip happens.
   */
  metadataRefreshMs?: number;
  /**
   * Recreate the stream's metadata with this many shards when it finds none (a stream never
   * created, or Redis lost its keys: a restart without persistence, `FLUSHALL`), as
   * `CoordinatorAdmin.createStream` would. Existing metadata always wins. Without it, a send to a
   * stream without metadata fails with `StreamNotFoundError` naming the prefix.
   */
  shardCount?: number;
  /**
   * OpenTelemetry (docs/observability.md): a `publish` span per send whose context goes into each
   * entry's headers (`traceparent`, through the registered propagator), and the sent-messages
   * metrics. Default true: active when the application has `@opentelemetry/api` and a provider
   * registered, one check per send otherwise. false turns it off altogether.
   */
  telemetry?: boolean;
  /**
   * Durability against a failover (docs/cluster.md): after each shard's write, `WAIT replicas
   * timeoutMs` on the same connection. A send resolves only when that many replicas of the shard's
   * master have the entry; when WAIT counts fewer in time, the entry is failed with a
   * `NotReplicatedError` (in a `PartialBatchError`, `maybeWritten: true`, with its `id`): it is on
   * the master, and a failover before it reaches a replica loses it; a retry may write it twice.
   * Without this option a send resolves once the master has the entry (Redis replicates
   * asynchronously: a failover can lose acknowledged sends). Costs the replication round trip.
   */
  waitForReplicas?: ReplicaWait;
}

/** How the producer routes now: the shard count, and the switch time of a resize not yet in effect. */
interface Routing {
  shardCount: number;
  previousShardCount: number;
  /** Local clock time (ms) from which `shardCount` applies; before it, `previousShardCount`. */
  switchAtLocal: number;
  checkedAt: number;
  /** The metadata fields it was read from (METADATA_FIELDS), from which missing routing markers are ensured. */
  metadata: Map<string, string | null>;
}

/** The metadata fields the producer reads: what routing needs, and what a shard's routing marker is made of. */
const METADATA_FIELDS = ['shardCount', 'previousShardCount', 'switchAt', 'metadataVersion', 'shardSpan'] as const;

/**
 * Writes keyed entries to a stream's shards. A key always goes to the same shard
 * (`shardForKey`, jump consistent hash), so one key's entries stay in order; an explicit
 * `shardIndex` overrides the key; entries without either are spread round-robin.
 *
 * Each write checks, in its shard's own hash slot, that the shard count it was routed with is the
 * one in effect; a write refused after a resize is re-routed with the count in effect, in order.
 *
 * @example
 * const producer = new StreamProducer(redis, { streamPrefix: 'summary' });
 * await producer.send({ key: 'user-42', payload: { text: 'hi' }, headers: { traceId: 'x' } });
 * await producer.sendBatch(events.map((e) => ({ key: e.userId, payload: e })));
 */
export class StreamProducer {
  private readonly keys: KeyBuilder;
  /** The codec this producer writes with (its name goes into each entry). */
  readonly codec: PayloadCodec;
  private routing: Routing | undefined;
  private refreshing: Promise<Routing> | undefined;
  private readonly refreshMs: number;
  private readonly shardCount: number | undefined;
  private routedCount = 0;
  private roundRobin = 0;
  /** Recent keys' shards for `routedCount` (keys repeat; hashing them is the hot path). */
  private readonly routes = new Map<string, number>();
  /**
   * Shard stream, routing marker and write log keys per shard index, built (and validated) once; on
   * a Cluster also the shard channel a write wakes the polling members on.
   */
  private readonly shardKeys: { stream: string; routing: string; writes: string; wake?: string }[] = [];
  /**
   * This producer's identity in the shards' write logs (appendEntries-3.lua), and its next write
   * sequence number per shard: a write the client sends again after a lost reply is not written twice.
   */
  readonly producerId = uuidv7();
  private readonly writeSeqs = new Map<number, number>();
  private readonly telemetry: ProducerTelemetry | undefined;
  private readonly replicaWait: ReplicaWait | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly options: StreamProducerOptions,
  ) {
    assertStreamPrefix(options?.streamPrefix);
    this.keys = new KeyBuilder(options.keyPrefix);
    this.codec = options.codec ?? jsonCodec;
    assertCodec(this.codec);
    if (options.maxLenApprox !== undefined) assertIntegerInRange('maxLenApprox', options.maxLenApprox, 1, Number.MAX_SAFE_INTEGER);
    this.refreshMs = assertIntegerInRange('metadataRefreshMs', options.metadataRefreshMs ?? 500, 1, 3_600_000);
    this.shardCount =
      options.shardCount === undefined ? undefined : assertIntegerInRange('shardCount', options.shardCount, 1, MAX_SHARD_COUNT);
    if (options.telemetry !== undefined && typeof options.telemetry !== 'boolean') {
      throw new TypeError(`telemetry must be a boolean, got ${JSON.stringify(options.telemetry)}`);
    }
    this.telemetry = options.telemetry === false ? undefined : new ProducerTelemetry(options.streamPrefix);
    this.replicaWait = assertReplicaWait('waitForReplicas', options.waitForReplicas);
  }

  /** Writes one entry; rejects with the write's error when it was not written. */
  async send<T>(message: OutgoingMessage<T>): Promise<SendResult> {
    try {
      const [result] = await this.sendBatch([message]);
      return result;
    } catch (error) {
      if (error instanceof PartialBatchError) throw (error.failed[0] as FailedEntry).error;
      throw error;
    }
  }

  /**
   * Writes many entries, one pipelined script call per shard; results are in the order of
   * `messages`. Bad input (a payload the codec refuses, a `shardIndex` outside the stream) is refused
   * before anything is written. When some entries are written and others not, rejects with a
   * `PartialBatchError` that lists both (ids of the written ones, errors of the others) and whose
   * `retryBatch()` keeps every key's order.
   */
  async sendBatch<T>(messages: OutgoingMessage<T>[]): Promise<SendResult[]> {
    if (messages.length === 0) return [];
    const probe = this.telemetry?.start(messages.length);
    if (!probe) return this.write(messages, messages);
    let results: SendResult[];
    try {
      // Entries carry the publish span's context; errors and results keep the caller's messages.
      results = await this.write(messages, probe.inject(messages));
    } catch (error) {
      if (error instanceof PartialBatchError) probe.end(error.written, error.failed.length, error);
      else probe.end([], messages.length, error);
      throw error;
    }
    probe.end(results, 0);
    return results;
  }

  /** sendBatch without telemetry: `outgoing` are what is encoded (`messages` with trace headers, or themselves). */
  private async write<T>(messages: OutgoingMessage<T>[], outgoing: OutgoingMessage<T>[]): Promise<SendResult[]> {
    const fields = outgoing.map((message) => this.encode(message));
    let shardCount = await this.currentShardCount();
    if (messages.some((m) => m.shardIndex !== undefined && m.shardIndex >= shardCount)) {
      // Perhaps the stream grew since the last check: look again before refusing.
      shardCount = await this.currentShardCount(true);
      const routing = this.routing!;
      const wait = routing.switchAtLocal - Date.now();
      if (wait > 0 && wait <= 50 && messages.every((m) => m.shardIndex === undefined || m.shardIndex < routing.shardCount)) {
        // A growth switches a millisecond after the resize (so that every entry routed with the old
        // count has an id below the switch): an entry for a new shard waits for it rather than fail.
        await new Promise((resolve) => setTimeout(resolve, wait + 1));
        shardCount = await this.currentShardCount();
      }
    }
    for (const message of messages) {
      if (message.shardIndex !== undefined) assertIntegerInRange('shardIndex', message.shardIndex, 0, shardCount - 1);
    }

    const written: (WrittenEntry | undefined)[] = new Array(messages.length);
    const failed: FailedEntry<T>[] = [];
    let pending = messages.map((_, i) => i);
    for (let round = 1; pending.length > 0; round++) {
      const appends = this.plan(messages, fields, pending, shardCount, failed);
      const outcomes = await appendToShards(
        this.redis,
        shardCount,
        this.options.maxLenApprox,
        appends.map((a) => a.append),
        this.replicaWait,
      );
      pending = [];
      let inEffect: number | undefined;
      let unrouted = false;
      /** Where each refused entry was routed this round (its shard if it fails now). */
      const routedTo = new Map<number, number>();
      appends.forEach(({ append, indices }, a) => {
        const outcome = outcomes[a];
        for (const index of indices) routedTo.set(index, append.shardIndex);
        // The entry that got the reply failed for its own reason; the ones after it were not tried.
        const fail = (from: number, error: Error, sameForAll = false) => {
          for (const index of indices.slice(from)) {
            failed.push({ index, message: messages[index], shardIndex: append.shardIndex, error, maybeWritten: false });
            if (!sameForAll) error = notAttempted(append.shardIndex);
          }
        };
        switch (outcome.status) {
          case 'written':
            for (const [i, index] of indices.entries()) written[index] = { index, shardIndex: append.shardIndex, id: outcome.ids[i] };
            break;
          case 'unreplicated':
            // On the master, not confirmed on replicas: the caller decides (retry: maybe twice).
            for (const [i, index] of indices.entries()) {
              failed.push({
                index,
                message: messages[index],
                shardIndex: append.shardIndex,
                error: outcome.error,
                maybeWritten: true,
                id: outcome.ids[i],
              });
            }
            break;
          case 'stopped':
            for (const [i, id] of outcome.ids.entries()) written[indices[i]] = { index: indices[i], shardIndex: append.shardIndex, id };
            fail(outcome.ids.length, outcome.error);
            break;
          case 'failed':
            for (const index of indices) {
              failed.push({
                index,
                message: messages[index],
                shardIndex: append.shardIndex,
                error: outcome.error,
                maybeWritten: !outcome.replied,
              });
            }
            break;
          case 'reroute':
            inEffect ??= outcome.shardCountInEffect;
            if (round < MAX_ROUNDS) pending.push(...indices);
            else
              fail(
                0,
                new Error(
                  `shard ${append.shardIndex} kept refusing writes routed with ${shardCount} shards (in effect: ${outcome.shardCountInEffect}) after ${MAX_ROUNDS} attempts`,
                ),
                true,
              );
            break;
          case 'unrouted':
            unrouted = true;
            if (round < MAX_ROUNDS) pending.push(...indices);
            else
              fail(
                0,
                new Error(
                  `shard ${append.shardIndex} of stream "${this.options.streamPrefix}" still had no routing marker after ${MAX_ROUNDS} attempts (are its keys being deleted?)`,
                ),
                true,
              );
            break;
        }
      });
      if (pending.length > 0) {
        // Re-route the refused entries in batch order, so each key's entries stay in order.
        pending.sort((a, b) => a - b);
        if (unrouted) {
          // A shard without a routing marker cannot check the count: Redis lost its keys (this
          // producer's cached count may predate the loss) or the stream predates markers. The
          // metadata decides (read now, after the refusal), and the markers are ensured from it.
          try {
            shardCount = await this.ensureRouting();
          } catch (error) {
            // No metadata (StreamNotFoundError), or Redis failed: these entries were not written.
            for (const index of pending) {
              failed.push({
                index,
                message: messages[index],
                shardIndex: routedTo.get(index)!,
                error: error as Error,
                maybeWritten: false,
              });
            }
            pending = [];
          }
        } else {
          // The shard said which count is in effect at Redis time: route with it, and look at the metadata again.
          shardCount = inEffect ?? shardCount;
          void this.currentShardCount(true).catch(() => undefined);
        }
      }
    }
    if (failed.length === 0) return written.map((entry) => ({ shardIndex: entry!.shardIndex, id: entry!.id }));
    throw new PartialBatchError<T>(
      written.filter((entry): entry is WrittenEntry => entry !== undefined),
      failed.sort((a, b) => a.index - b.index),
    );
  }

  private encode(message: OutgoingMessage): (string | Buffer)[] {
    if (message.key !== undefined && typeof message.key !== 'string')
      throw new TypeError(`key must be a string, got ${typeof message.key}`);
    if (message.shardIndex !== undefined) assertIntegerInRange('shardIndex', message.shardIndex, 0, MAX_SHARD_COUNT - 1);
    return encodeEntry(message, this.codec);
  }

  /** Groups the entries at `indices` by the shard they route to with `shardCount`, in batch order. */
  private plan(
    messages: OutgoingMessage[],
    fields: (string | Buffer)[][],
    indices: number[],
    shardCount: number,
    failed: FailedEntry[],
  ): { append: ShardAppend; indices: number[] }[] {
    if (this.routedCount !== shardCount) {
      // Routes are only valid for the count they were computed with.
      this.routes.clear();
      this.routedCount = shardCount;
    }
    for (let i = this.shardKeys.length; i < shardCount; i++) {
      this.shardKeys.push({
        stream: this.keys.shardStream(this.options.streamPrefix, i),
        routing: this.keys.shardRouting(this.options.streamPrefix, i),
        writes: this.keys.shardProducerWrites(this.options.streamPrefix, i, this.producerId),
        wake: isCluster(this.redis) ? this.keys.shardWakeChannel(this.options.streamPrefix, i) : undefined,
      });
    }
    const byShard = new Map<number, { append: ShardAppend; indices: number[] }>();
    for (const index of indices) {
      const message = messages[index];
      if (message.shardIndex !== undefined && message.shardIndex >= shardCount) {
        // Only after a re-route: a shrink removed the shard this entry was addressed to.
        failed.push({
          index,
          message,
          shardIndex: message.shardIndex,
          maybeWritten: false,
          error: new RangeError(`shardIndex ${message.shardIndex} no longer takes writes: the stream has ${shardCount} shards now`),
        });
        continue;
      }
      const shardIndex = this.route(message, shardCount);
      let group = byShard.get(shardIndex);
      if (!group) {
        const writeSeq = (this.writeSeqs.get(shardIndex) ?? 0) + 1;
        this.writeSeqs.set(shardIndex, writeSeq);
        group = { append: { shardIndex, ...this.shardKeys[shardIndex], writeSeq, entries: [] }, indices: [] };
        byShard.set(shardIndex, group);
      }
      group.append.entries.push(fields[index]);
      group.indices.push(index);
    }
    return [...byShard.values()];
  }

  private route(message: OutgoingMessage, shardCount: number): number {
    if (message.shardIndex !== undefined) return message.shardIndex;
    if (message.key !== undefined) {
      let shard = this.routes.get(message.key);
      if (shard === undefined) {
        if (this.routes.size >= ROUTE_CACHE_SIZE) this.routes.clear();
        shard = shardForKey(message.key, shardCount);
        this.routes.set(message.key, shard);
      }
      return shard;
    }
    this.roundRobin = (this.roundRobin + 1) % shardCount;
    return this.roundRobin;
  }

  /** The shard count to route with now: checked against Redis at most every `metadataRefreshMs`. */
  private async currentShardCount(force = false): Promise<number> {
    let routing = this.routing;
    if (force || !routing || Date.now() - routing.checkedAt >= this.refreshMs) routing = await this.refresh();
    return Date.now() < routing.switchAtLocal ? routing.previousShardCount : routing.shardCount;
  }

  /**
   * Reads the metadata again (recreating it when it is gone and `shardCount` is set, otherwise
   * throwing `StreamNotFoundError`), ensures every shard's routing marker from it, and returns the
   * count to route with.
   */
  private async ensureRouting(): Promise<number> {
    // A read already in flight may have started before the refusal (before Redis lost its keys):
    // its answer must not make the markers. Wait for it, then read again.
    await this.refreshing?.catch(() => undefined);
    const routing = await this.refresh();
    await ensureStreamRouting(this.redis, this.keys, this.options.streamPrefix, routing.metadata);
    return Date.now() < routing.switchAtLocal ? routing.previousShardCount : routing.shardCount;
  }

  /** One round trip, shared by the sends waiting for it. */
  private refresh(): Promise<Routing> {
    this.refreshing ??= (async () => {
      try {
        let [meta, redisNow] = await this.readMetadata();
        if (meta[0] === null) {
          if (this.shardCount === undefined) {
            throw new StreamNotFoundError(this.options.streamPrefix, 'producer, nothing written');
          }
          // Lost (or never created): recreate it as configured. Another creator may win the race
          // with another count; theirs stands, like any existing metadata.
          await createStreamMetadata(this.redis, this.keys, this.options.streamPrefix, this.shardCount).catch((error: unknown) => {
            if (!(error instanceof ShardCountConflictError)) throw error;
          });
          [meta, redisNow] = await this.readMetadata();
          if (meta[0] === null)
            throw new StreamNotFoundError(
              this.options.streamPrefix,
              'producer, nothing written: its metadata vanished right after it was created',
            );
        }
        const [shardCount, previousShardCount, switchAt] = meta;
        const localNow = Date.now();
        this.routing = {
          shardCount: Number(shardCount),
          previousShardCount: Number(previousShardCount ?? shardCount),
          // Redis time decides when a resize applies; translated to this clock once per check.
          switchAtLocal: switchAt === null ? 0 : Number(switchAt) - redisNow + localNow,
          checkedAt: localNow,
          metadata: new Map(METADATA_FIELDS.map((field, i) => [field, meta[i]])),
        };
        return this.routing;
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  /** The METADATA_FIELDS, and Redis time, in one round trip. */
  private async readMetadata(): Promise<[(string | null)[], number]> {
    // TIME rides in the metadata's pipeline (the same node's clock), which ioredis does not resend
    // on MOVED or ASK (TIME is not read-only): execBySlot refreshes the slot table and sends it
    // again. A raw pipeline failed every send "MOVED" after the coordinator's slot moved or failed
    // over, until the client's slot table happened to refresh (the cluster soak: 20 s and more).
    const key = this.keys.streamMeta(this.options.streamPrefix);
    const [result] = await execBySlot(this.redis, [{ build: (pipeline) => pipeline.hmget(key, ...METADATA_FIELDS) }], {
      tail: (pipeline) => pipeline.time(),
    });
    if ('error' in result) throw result.error;
    const [meta, time] = [result.replies[0], result.tail[0]] as [[Error | null, (string | null)[]], [Error | null, [string, string]]];
    if (meta[0]) throw meta[0];
    if (time[0]) throw time[0];
    return [meta[1], Number(time[1][0]) * 1000 + Math.floor(Number(time[1][1]) / 1000)];
  }
}

function notAttempted(shardIndex: number): Error {
  return new Error(
    `not written: an earlier entry of this batch for shard ${shardIndex} failed, and writes to a shard stop there so that a retry keeps each key's order`,
  );
}
