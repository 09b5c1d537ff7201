import { ErrorCode, errorCodeFromWire } from '../protocol/error-codes';
import { toCoordinatorError } from '../protocol/errors';
import { assertIntegerInRange } from '../protocol/names';
import type { GroupDescription, StreamMetadata } from '../protocol/records';
import { type CoordinatorOptions, resolveCoordinatorOptions } from '../redis/coordinator-options';
import { KeyBuilder } from '../redis/keys';
import { pairs, parseShardCsv } from '../redis/responses';
import { type RedisClient, runScript } from '../redis/scripts';
import { toGroupDescription, type ShardStats } from './group-description';

export const MAX_SHARD_COUNT = 65_536;

export interface CreateStreamOptions {
  streamPrefix: string;
  shardCount: number;
}

/**
 * Administration of streams and groups.
 *
 * @example
 * const admin = new CoordinatorAdmin(redis);
 * await admin.createStream({ streamPrefix: 'summary', shardCount: 8 }); // idempotent
 * const { group, members } = await admin.describeGroup('summary', 'summary-group');
 */
export class CoordinatorAdmin {
  readonly keys: KeyBuilder;

  constructor(
    private readonly redis: RedisClient,
    options: Pick<CoordinatorOptions, 'keyPrefix'> = {},
  ) {
    this.keys = new KeyBuilder(resolveCoordinatorOptions({ keyPrefix: options.keyPrefix }).keyPrefix);
  }

  /**
   * Creates the shard metadata of a stream prefix. Calling it again with the same shard count is a
   * no-op; another count is a `ShardCountConflictError` (use `resizeShards`).
   */
  async createStream(options: CreateStreamOptions): Promise<StreamMetadata & { created: boolean }> {
    const shardCount = assertIntegerInRange('shardCount', options.shardCount, 1, MAX_SHARD_COUNT);
    const reply = (await runScript(this.redis, 'createStream', [this.keys.streamMeta(options.streamPrefix)], [shardCount])) as unknown[];
    const code = errorCodeFromWire(reply[0]);
    if (code !== ErrorCode.NONE) throw toCoordinatorError(code, `stream "${options.streamPrefix}": ${String(reply[1])}`);
    return { ...toStreamMetadata(options.streamPrefix, pairs(reply[3])), created: Number(reply[2]) === 1 };
  }

  /** The stream's shard metadata, or null when the prefix has none. */
  async describeStream(streamPrefix: string): Promise<StreamMetadata | null> {
    const flat = await this.redis.hgetall(this.keys.streamMeta(streamPrefix));
    return Object.keys(flat).length === 0 ? null : toStreamMetadata(streamPrefix, Object.entries(flat));
  }

  /**
   * A consistent snapshot of one group in the JSON shapes of SPEC section 2, with per-shard owner,
   * lag and pending counts. Throws `GroupNotFoundError` when the group has never had a member.
   */
  async describeGroup(streamPrefix: string, consumerGroup: string): Promise<GroupDescription> {
    const reply = (await runScript(this.redis, 'describeGroup', this.keys.groupKeys(streamPrefix, consumerGroup), [])) as unknown[];
    if (reply[6] === '') {
      throw toCoordinatorError(ErrorCode.GROUP_NOT_FOUND, `group "${consumerGroup}" of stream "${streamPrefix}" does not exist`);
    }
    const stream = new Map(pairs(reply[0]));
    const readable = parseShardCsv(stream.get('readableShardSet'));
    const stats = await Promise.all(readable.map((shard) => this.shardStats(streamPrefix, shard, consumerGroup)));
    return toGroupDescription({
      streamPrefix,
      consumerGroup,
      stream,
      group: new Map(pairs(reply[1])),
      members: pairs(reply[2]),
      leases: new Map(pairs(reply[3])),
      target: pairs(reply[4]),
      owners: new Map(pairs(reply[5])),
      state: String(reply[6]),
      shardStats: new Map(readable.map((shard, i) => [shard, stats[i]])),
    });
  }

  /** Lag and pending of the group on one shard stream (zero when the stream or group does not exist yet). */
  private async shardStats(streamPrefix: string, shardIndex: number, consumerGroup: string): Promise<ShardStats> {
    let groups: unknown[];
    try {
      groups = (await this.redis.xinfo('GROUPS', this.keys.shardStream(streamPrefix, shardIndex))) as unknown[];
    } catch (error) {
      if (/no such key/i.test(String(error))) return { lag: 0, pending: 0 };
      throw error;
    }
    for (const entry of groups) {
      const fields = new Map(pairs(entry));
      if (fields.get('name') === consumerGroup) {
        return { lag: Number(fields.get('lag') ?? 0) || 0, pending: Number(fields.get('pending') ?? 0) };
      }
    }
    return { lag: 0, pending: 0 };
  }
}

function toStreamMetadata(streamPrefix: string, entries: [string, string][]): StreamMetadata {
  const meta = new Map(entries);
  return {
    streamPrefix,
    shardCount: Number(meta.get('shardCount')),
    metadataVersion: Number(meta.get('metadataVersion')),
    readableShardSet: parseShardCsv(meta.get('readableShardSet')),
    writableShardSet: parseShardCsv(meta.get('writableShardSet')),
    createdAt: new Date(Number(meta.get('createdAt'))).toISOString(),
    updatedAt: new Date(Number(meta.get('updatedAt'))).toISOString(),
  };
}
