import { encodeEntry, jsonCodec, type OutgoingMessage, type PayloadCodec } from '../protocol/entry-format';
import { GroupNotFoundError } from '../protocol/errors';
import { assertIntegerInRange, assertStreamPrefix } from '../protocol/names';
import { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';
import { shardForKey } from './key-hash';

const ROUTE_CACHE_SIZE = 10_000;

export interface StreamProducerOptions {
  streamPrefix: string;
  /** Key prefix of the coordinator keys. Default `rsc`. */
  keyPrefix?: string;
  /** Payload codec. Default JSON. */
  codec?: PayloadCodec;
  /** Approximate cap per shard stream (`XADD MAXLEN ~`). Default: no trimming. */
  maxLenApprox?: number;
  /**
   * How often the producer re-reads the stream's shard metadata, so that it follows `resizeShards`
   * without a restart. Keep it below the resizes' `graceMs`. Default 500 ms.
   */
  metadataRefreshMs?: number;
}

/** How the producer routes now: the shard count, and the switch time of a resize not yet in effect. */
interface Routing {
  shardCount: number;
  previousShardCount: number;
  /** Local clock time (ms) from which `shardCount` applies; before it, `previousShardCount`. */
  switchAtLocal: number;
  checkedAt: number;
}

export interface SendResult {
  shardIndex: number;
  id: string;
}

/**
 * Writes keyed entries to a stream's shards. A key always goes to the same shard
 * (`shardForKey`, jump consistent hash), so one key's entries stay in order; an explicit
 * `shardIndex` overrides the key; entries without either are spread round-robin.
 *
 * @example
 * const producer = new StreamProducer(redis, { streamPrefix: 'summary' });
 * await producer.send({ key: 'user-42', payload: { text: 'hi' }, headers: { traceId: 'x' } });
 * await producer.sendBatch(events.map((e) => ({ key: e.userId, payload: e })));
 */
export class StreamProducer {
  private readonly keys: KeyBuilder;
  private readonly codec: PayloadCodec;
  private routing: Routing | undefined;
  private refreshing: Promise<Routing> | undefined;
  private readonly refreshMs: number;
  private routedCount = 0;
  private roundRobin = 0;
  /** Recent keys' shards for the current shard count (keys repeat; hashing them is the hot path). */
  private readonly routes = new Map<string, number>();
  /** Shard stream key per shard index, built (and validated) once. */
  private streams: string[] = [];

  constructor(
    private readonly redis: RedisClient,
    private readonly options: StreamProducerOptions,
  ) {
    assertStreamPrefix(options?.streamPrefix);
    this.keys = new KeyBuilder(options.keyPrefix);
    this.codec = options.codec ?? jsonCodec;
    if (typeof this.codec.encode !== 'function') throw new TypeError('codec must have an encode(payload) function');
    if (options.maxLenApprox !== undefined) assertIntegerInRange('maxLenApprox', options.maxLenApprox, 1, Number.MAX_SAFE_INTEGER);
    this.refreshMs = assertIntegerInRange('metadataRefreshMs', options.metadataRefreshMs ?? 500, 1, 3_600_000);
  }

  async send<T>(message: OutgoingMessage<T>): Promise<SendResult> {
    const [result] = await this.sendBatch([message]);
    return result;
  }

  /** Writes many entries in one pipeline; results are in the order of `messages`. */
  async sendBatch<T>(messages: OutgoingMessage<T>[]): Promise<SendResult[]> {
    if (messages.length === 0) return [];
    let shardCount = await this.currentShardCount();
    if (messages.some((m) => m.shardIndex !== undefined && m.shardIndex >= shardCount)) {
      // Perhaps the stream grew since the last check: look again before refusing.
      shardCount = await this.currentShardCount(true);
    }
    if (this.routedCount !== shardCount) {
      // Routes are only valid for the count they were computed with.
      this.routes.clear();
      this.routedCount = shardCount;
    }
    for (let i = this.streams.length; i < shardCount; i++) this.streams.push(this.keys.shardStream(this.options.streamPrefix, i));
    const pipeline = this.redis.pipeline();
    const trim = this.options.maxLenApprox === undefined ? [] : ['MAXLEN', '~', String(this.options.maxLenApprox)];
    const shards = messages.map((message) => {
      const shardIndex = this.route(message, shardCount);
      pipeline.xadd(this.streams[shardIndex], ...trim, '*', ...encodeEntry(message, this.codec));
      return shardIndex;
    });
    const replies = (await pipeline.exec()) ?? [];
    return replies.map(([error, id], i) => {
      if (error) throw error;
      return { shardIndex: shards[i], id: String(id) };
    });
  }

  private route(message: OutgoingMessage, shardCount: number): number {
    if (message.shardIndex !== undefined) {
      return assertIntegerInRange('shardIndex', message.shardIndex, 0, shardCount - 1);
    }
    if (message.key !== undefined) {
      if (typeof message.key !== 'string') throw new TypeError(`key must be a string, got ${typeof message.key}`);
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

  /** One round trip, shared by the sends waiting for it. */
  private refresh(): Promise<Routing> {
    this.refreshing ??= (async () => {
      try {
        const [meta, time] = (await this.redis
          .pipeline()
          .hmget(this.keys.streamMeta(this.options.streamPrefix), 'shardCount', 'previousShardCount', 'switchAt')
          .time()
          .exec()) as [[Error | null, (string | null)[]], [Error | null, [string, string]]];
        if (meta[0]) throw meta[0];
        if (time[0]) throw time[0];
        const [shardCount, previousShardCount, switchAt] = meta[1];
        if (shardCount === null) {
          throw new GroupNotFoundError(`stream "${this.options.streamPrefix}" has no metadata: create it with CoordinatorAdmin.createStream`);
        }
        const localNow = Date.now();
        const redisNow = Number(time[1][0]) * 1000 + Math.floor(Number(time[1][1]) / 1000);
        this.routing = {
          shardCount: Number(shardCount),
          previousShardCount: Number(previousShardCount ?? shardCount),
          // Redis time decides when a resize applies; translated to this clock once per check.
          switchAtLocal: switchAt === null ? 0 : Number(switchAt) - redisNow + localNow,
          checkedAt: localNow,
        };
        return this.routing;
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }
}
