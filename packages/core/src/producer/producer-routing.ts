import { ShardCountConflictError, StreamNotFoundError } from '../protocol/errors';
import { execBySlot } from '../redis/connection/slot-pipelines';
import type { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';
import { createStreamMetadata, ensureStreamRouting } from '../redis/stream-metadata';

/**
 * A growth switches a millisecond after the resize (so that every entry routed with the old count
 * has an id below the switch): an entry addressed to a new shard waits up to this long for the
 * switch rather than fail.
 */
const GROWTH_SWITCH_WAIT_MS = 50;

/** What a producer's caller can do about a missing stream (StreamNotFoundError's remedy). */
const CREATE_OR_GIVE_SHARD_COUNT = 'create it with CoordinatorAdmin.createStream, or give the StreamProducer shardCount to create it';

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
 * The shard count a producer routes with: the stream's metadata, read again at most every
 * `refreshMs` (one round trip shared by every send waiting for it), recreated when it is gone and
 * the producer was given a `shardCount`.
 */
export class ProducerRouting {
  private routing: Routing | undefined;
  private refreshing: Promise<Routing> | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: KeyBuilder,
    private readonly streamPrefix: string,
    private readonly refreshMs: number,
    /** Recreate missing metadata with this many shards; undefined: `StreamNotFoundError`. */
    private readonly recreateWith: number | undefined,
  ) {}

  /** The count to route with now when the last read is recent enough; undefined when it must be read again. */
  cached(): number | undefined {
    const routing = this.routing;
    if (!routing || Date.now() - routing.checkedAt >= this.refreshMs) return undefined;
    return Date.now() < routing.switchAtLocal ? routing.previousShardCount : routing.shardCount;
  }

  /** The shard count to route with now: checked against Redis at most every `refreshMs` (at once with `force`). */
  async current(force = false): Promise<number> {
    let routing = this.routing;
    if (force || !routing || Date.now() - routing.checkedAt >= this.refreshMs) routing = await this.refresh();
    return Date.now() < routing.switchAtLocal ? routing.previousShardCount : routing.shardCount;
  }

  /**
   * The count to route with when an explicit `shardIndex` is beyond the known one: perhaps the
   * stream grew since the last check, so it is read again (and a growth about to switch is waited for).
   */
  async covering(shardIndex: number): Promise<number> {
    let count = await this.current(true);
    const routing = this.routing!;
    const wait = routing.switchAtLocal - Date.now();
    if (shardIndex >= count && wait > 0 && wait <= GROWTH_SWITCH_WAIT_MS && shardIndex < routing.shardCount) {
      await new Promise((resolve) => setTimeout(resolve, wait + 1));
      count = await this.current();
    }
    return count;
  }

  /**
   * Reads the metadata again (recreating it when it is gone and `recreateWith` is set, otherwise
   * throwing `StreamNotFoundError`), ensures every shard's routing marker from it, and returns the
   * count to route with.
   */
  async ensureMarkers(): Promise<number> {
    const routing = await this.reread();
    await ensureStreamRouting(this.redis, this.keys, this.streamPrefix, routing.metadata);
    return Date.now() < routing.switchAtLocal ? routing.previousShardCount : routing.shardCount;
  }

  /**
   * Reads the metadata after a shard refused a write: a read already in flight may have started
   * before the refusal (before a resize switched, before Redis lost its keys), so its answer must
   * not decide. Waits for it, then reads again.
   */
  async reread(): Promise<Routing> {
    await this.refreshing?.catch(() => undefined);
    return this.refresh();
  }

  /** One round trip, shared by the sends waiting for it. */
  refresh(): Promise<Routing> {
    this.refreshing ??= (async () => {
      try {
        let [meta, redisNow] = await this.readMetadata();
        if (meta[0] === null) {
          if (this.recreateWith === undefined) {
            throw new StreamNotFoundError(this.streamPrefix, 'producer, nothing written', CREATE_OR_GIVE_SHARD_COUNT);
          }
          // Lost (or never created): recreate it as configured. Another creator may win the race
          // with another count; theirs stands, like any existing metadata.
          await createStreamMetadata(this.redis, this.keys, this.streamPrefix, this.recreateWith).catch((error: unknown) => {
            if (!(error instanceof ShardCountConflictError)) throw error;
          });
          [meta, redisNow] = await this.readMetadata();
          if (meta[0] === null)
            throw new StreamNotFoundError(
              this.streamPrefix,
              'producer, nothing written: its metadata vanished right after it was created',
              CREATE_OR_GIVE_SHARD_COUNT,
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
    const key = this.keys.streamMeta(this.streamPrefix);
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
