import { CoordinatorAdmin } from '../admin/coordinator-admin';
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
  private readonly admin: CoordinatorAdmin;
  private readonly codec: PayloadCodec;
  private shardCount: Promise<number> | undefined;
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
    this.admin = new CoordinatorAdmin(redis, { keyPrefix: options.keyPrefix });
    this.codec = options.codec ?? jsonCodec;
    if (typeof this.codec.encode !== 'function') throw new TypeError('codec must have an encode(payload) function');
    if (options.maxLenApprox !== undefined) assertIntegerInRange('maxLenApprox', options.maxLenApprox, 1, Number.MAX_SAFE_INTEGER);
  }

  async send<T>(message: OutgoingMessage<T>): Promise<SendResult> {
    const [result] = await this.sendBatch([message]);
    return result;
  }

  /** Writes many entries in one pipeline; results are in the order of `messages`. */
  async sendBatch<T>(messages: OutgoingMessage<T>[]): Promise<SendResult[]> {
    if (messages.length === 0) return [];
    const shardCount = await this.currentShardCount();
    if (this.streams.length !== shardCount) {
      this.streams = Array.from({ length: shardCount }, (_, i) => this.keys.shardStream(this.options.streamPrefix, i));
    }
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

  private currentShardCount(): Promise<number> {
    this.shardCount ??= this.admin.describeStream(this.options.streamPrefix).then((stream) => {
      if (!stream) {
        this.shardCount = undefined;
        throw new GroupNotFoundError(`stream "${this.options.streamPrefix}" has no metadata: create it with CoordinatorAdmin.createStream`);
      }
      return stream.shardCount;
    });
    return this.shardCount;
  }
}
