import { v7 as uuidv7 } from 'uuid';
import { assertCodec } from '../protocol/codecs';
import { encodeEntry, jsonCodec, type OutgoingMessage, type PayloadCodec } from '../protocol/entry-format';
import { assertStreamPrefix } from '../protocol/names';
import { checkOption, OPTION_RANGES } from '../protocol/option-ranges';
import { assertReplicaWait, type ReplicaWait } from '../redis/connection/replica-wait';
import { isCluster } from '../redis/connection/slot-pipelines';
import { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';
import { ProducerTelemetry } from '../telemetry/producer-telemetry';
import { ProducerRouting } from './producer-routing';
import { DEFAULT_APPEND_TIMEOUT_MS, SendMerger, type ShardKeys } from './send-merger';
import type { SendResult } from './send-results';
import { SendUnit } from './send-unit';

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
  /**
   * How long a write call (one shard's merged sends) waits for its reply, plus `waitForReplicas`'
   * timeout. Past it, its entries fail with `maybeWritten: true` (the call may still run; a resend
   * by ioredis is answered from the shard's write log, never written twice) and the shard's next
   * call goes. Default 10,000 ms (`DEFAULT_APPEND_TIMEOUT_MS`): past a reconnect and resend, far
   * below TCP giving a silent connection up.
   */
  appendTimeoutMs?: number;
}

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
  /**
   * This producer's identity in the shards' write logs (appendEntries-5.lua): a call the client
   * sends again after a lost reply is answered from the log, not written twice.
   */
  readonly producerId = uuidv7();
  private readonly routing: ProducerRouting;
  private readonly merger: SendMerger;
  /**
   * Shard stream, routing marker and write log keys per shard index, built (and validated) once; on
   * a Cluster also the shard channel a write wakes the polling members on.
   */
  private readonly shardKeys: ShardKeys[] = [];
  private readonly telemetry: ProducerTelemetry | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly options: StreamProducerOptions,
  ) {
    assertStreamPrefix(options?.streamPrefix);
    this.keys = new KeyBuilder(options.keyPrefix);
    this.codec = options.codec ?? jsonCodec;
    assertCodec(this.codec);
    if (options.maxLenApprox !== undefined) checkOption('producer.maxLenApprox', options.maxLenApprox);
    const refreshMs = checkOption('producer.metadataRefreshMs', options.metadataRefreshMs ?? 500);
    const shardCount = options.shardCount === undefined ? undefined : checkOption('shardCount', options.shardCount);
    if (options.telemetry !== undefined && typeof options.telemetry !== 'boolean') {
      throw new TypeError(`telemetry must be a boolean, got ${JSON.stringify(options.telemetry)}`);
    }
    this.telemetry = options.telemetry === false ? undefined : new ProducerTelemetry(options.streamPrefix);
    this.routing = new ProducerRouting(redis, this.keys, options.streamPrefix, refreshMs, shardCount);
    this.merger = new SendMerger(redis, this.routing, {
      maxLenApprox: options.maxLenApprox,
      replicaWait: assertReplicaWait('waitForReplicas', options.waitForReplicas),
      appendTimeoutMs: checkOption('producer.appendTimeoutMs', options.appendTimeoutMs ?? DEFAULT_APPEND_TIMEOUT_MS),
      streamPrefix: options.streamPrefix,
      shardKeys: (shardIndex) => this.keysOf(shardIndex),
    });
  }

  /**
   * Writes one entry; rejects with the write's error when it was not written. Sends made while
   * others are under way share their shard's next script call (merged sends, docs/runtime.md).
   */
  send<T>(message: OutgoingMessage<T>): Promise<SendResult> {
    return this.submit([message], true) as Promise<SendResult>;
  }

  /**
   * Writes many entries, one script call per shard (per MAX_ENTRIES_PER_CALL entries); results are
   * in the order of `messages`. Bad input (a payload the codec refuses, a `shardIndex` outside the
   * stream) is refused before anything is written. When some entries are written and others not,
   * rejects with a `PartialBatchError` that lists both (ids of the written ones, errors of the
   * others) and whose `retryBatch()` keeps every key's order.
   */
  sendBatch<T>(messages: OutgoingMessage<T>[]): Promise<SendResult[]> {
    if (messages.length === 0) return Promise.resolve([]);
    return this.submit(messages, false) as Promise<SendResult[]>;
  }

  /**
   * Validates and encodes the messages now, so that bad input is refused before it joins a call,
   * then queues them. With telemetry, the entries carry the publish span's context; errors and
   * results keep the caller's messages.
   */
  private submit<T>(messages: OutgoingMessage<T>[], single: boolean): Promise<SendResult[] | SendResult> {
    const probe = this.telemetry?.start(messages.length);
    let unit: SendUnit<T>;
    let fields: (string | Buffer)[][];
    let dues: string[];
    try {
      const outgoing = probe ? probe.inject(messages) : messages;
      fields = outgoing.map((message) => this.encode(message));
      dues = messages.map(dueOf);
      unit = new SendUnit(messages, single, probe, this.routing.cached());
    } catch (error) {
      probe?.end([], messages.length, error);
      return Promise.reject(error);
    }
    this.merger.add(unit as SendUnit, fields, dues);
    return unit.promise;
  }

  private encode(message: OutgoingMessage): (string | Buffer)[] {
    assertMessageShape(message);
    if (message.key !== undefined && typeof message.key !== 'string')
      throw new TypeError(`key must be a string, got ${typeof message.key}`);
    if (message.shardIndex !== undefined) checkOption('shardIndex', message.shardIndex);
    return encodeEntry(message, this.codec);
  }

  private keysOf(shardIndex: number): ShardKeys {
    for (let i = this.shardKeys.length; i <= shardIndex; i++) {
      this.shardKeys.push({
        stream: this.keys.shardStream(this.options.streamPrefix, i),
        routing: this.keys.shardRouting(this.options.streamPrefix, i),
        writes: this.keys.shardProducerWrites(this.options.streamPrefix, i, this.producerId),
        schedule: this.keys.shardSchedule(this.options.streamPrefix, i),
        scheduledEntries: this.keys.shardScheduledEntries(this.options.streamPrefix, i),
        wake: isCluster(this.redis) ? this.keys.shardWakeChannel(this.options.streamPrefix, i) : undefined,
      });
    }
    return this.shardKeys[shardIndex];
  }
}

/**
 * When a message is due, as appendEntries-5.lua takes it: '' now, '+<ms>' after the write's Redis
 * time (`delayMs`: Redis' clock, so the producer's clock does not matter), '@<epoch ms>'
 * (`deliverAt`: a time the sender named, on its clock), a delayed one routed by its key with a
 * trailing 'k'. Refuses a value out of its range, naming it.
 */
function dueOf(message: OutgoingMessage): string {
  const due = dueTimeSpec(message);
  // Routed by its key (no explicit shardIndex): the schedule keeps the count it was routed with,
  // and a key that count no longer routes to this shard when it is due is moved to its shard then.
  return due !== '' && message.key !== undefined && message.shardIndex === undefined ? `${due}k` : due;
}

function dueTimeSpec(message: OutgoingMessage): string {
  const { delayMs, deliverAt } = message;
  if (delayMs !== undefined && deliverAt !== undefined) {
    throw new TypeError(
      `a message takes delayMs or deliverAt, not both (got delayMs ${JSON.stringify(delayMs)} and deliverAt ${String(deliverAt)})`,
    );
  }
  if (delayMs !== undefined) {
    const delay = checkOption('producer.send.delayMs', delayMs);
    return delay === 0 ? '' : `+${delay}`;
  }
  if (deliverAt === undefined) return '';
  const at = deliverAt instanceof Date ? deliverAt.getTime() : deliverAt;
  if (!(deliverAt instanceof Date) && typeof deliverAt !== 'number') {
    throw new TypeError(`deliverAt must be a Date or epoch milliseconds, got ${typeof deliverAt}`);
  }
  checkOption('producer.send.deliverAt', at);
  // As far ahead as delayMs may reach, on the sender's clock (the only clock a named time can mean).
  const latest = Date.now() + OPTION_RANGES['producer.send.delayMs'].max;
  if (at > latest) {
    throw new RangeError(
      `deliverAt must be at most 365 days ahead (${new Date(latest).toISOString()} now), got ${at} (${new Date(at).toISOString()})`,
    );
  }
  return `@${at}`;
}

/** The fields of an OutgoingMessage: anything else is a mistake (a header at the top level, `data` for `payload`). */
const MESSAGE_FIELDS: readonly string[] = ['payload', 'key', 'headers', 'shardIndex', 'delayMs', 'deliverAt'];

/**
 * Refuses a message that is not `{ payload, key?, headers?, shardIndex?, delayMs?, deliverAt? }`, naming what is wrong,
 * where the codec would only say that `undefined` cannot be encoded: the usual slip is the bare
 * data (`{ data, correlationId }`, the shape other Redis Streams transports take).
 */
function assertMessageShape(message: unknown): void {
  const shape = 'a message is { payload, key?, headers?, shardIndex?, delayMs?, deliverAt? }';
  if (message === null || typeof message !== 'object' || Array.isArray(message)) {
    throw new TypeError(`${shape}, got ${message === null ? 'null' : Array.isArray(message) ? 'an array' : typeof message}`);
  }
  const fields = Object.keys(message);
  if (!('payload' in message)) {
    throw new TypeError(
      `${shape}: this one has no payload (its fields: ${fields.join(', ') || 'none'}); put the data in payload and string headers in headers`,
    );
  }
  const unknown = fields.find((field) => !MESSAGE_FIELDS.includes(field));
  if (unknown !== undefined) {
    throw new TypeError(
      `${shape}: ${JSON.stringify(unknown)} is not one of its fields; a header goes in headers: { ${JSON.stringify(unknown)}: '…' }`,
    );
  }
}
