import { ensureScripts, pipelineScript, type RedisClient } from '../redis/scripts';
import { NotReplicatedError, type ReplicaWait, waitCommand, waitShortfall } from '../redis/connection/replica-wait';
import { execBySlot } from '../redis/connection/slot-pipelines';

/** One shard's part of a producer batch: its keys and the entries' flat field lists, in order. */
export interface ShardAppend {
  shardIndex: number;
  stream: string;
  routing: string;
  /** The producer's write log on the shard, and this call's sequence number in it (unique per producer and shard). */
  writes: string;
  writeSeq: number;
  /** Field names and values; a binary codec's payload is bytes, stored as they are. */
  entries: (string | Buffer)[][];
  /** The shard channel published on once entries are written (on a Cluster, where members poll), or undefined. */
  wake?: string;
}

/** What became of one shard's part (appendEntries-3.lua). */
export type ShardAppendOutcome =
  /** Every entry written; `ids` in order. */
  | { status: 'written'; ids: string[] }
  /**
   * Every entry written on the master (`ids`), but WAIT counted only `replicas` replicas that have
   * them when the caller asked for more: a failover now may lose them.
   */
  | { status: 'unreplicated'; ids: string[]; replicas: number; error: Error }
  /** Nothing written: the shard count in effect is not the routed one (or the shard takes no writes). */
  | { status: 'reroute'; shardCountInEffect: number }
  /**
   * Nothing written: the shard has no routing marker (Redis lost its keys, or the stream predates
   * markers), so the count in effect is unknown there; the metadata decides, and its markers are ensured.
   */
  | { status: 'unrouted' }
  /**
   * `ids` of the entries written before the first failed write (`error`, Redis' reply); nothing
   * after it was attempted.
   */
  | { status: 'stopped'; ids: string[]; error: Error }
  /**
   * The call failed as a whole. `replied`: Redis answered with an error, so nothing was written;
   * otherwise the reply never came (connection lost, timeout) and the entries may or may not be in
   * the stream.
   */
  | { status: 'failed'; error: Error; replied: boolean };

/**
 * Writes each shard's entries with one `appendEntries` script call: all in one pipeline on a single
 * Redis (one round trip however many shards), one pipeline per shard on a Cluster (each shard has its
 * own slot), sent side by side. The outcome of each shard is independent of the others'. With
 * `replicaWait`, a `WAIT` follows on the same connection (once per pipeline).
 */
export async function appendToShards(
  client: RedisClient,
  routedCount: number,
  maxLenApprox: number | undefined,
  appends: readonly ShardAppend[],
  replicaWait?: ReplicaWait,
): Promise<ShardAppendOutcome[]> {
  ensureScripts(client);
  const cap = maxLenApprox === undefined ? '' : String(maxLenApprox);
  const results = await execBySlot(
    client,
    appends.map((append) => ({
      build(pipeline) {
        const args: (string | number | Buffer)[] = [append.shardIndex, routedCount, cap, append.writeSeq, append.wake ?? ''];
        for (const fields of append.entries) args.push(fields.length, ...fields);
        pipelineScript(pipeline, 'appendEntries', [append.stream, append.routing, append.writes], args);
      },
    })),
    replicaWait ? { tail: (pipeline) => waitCommand(pipeline, replicaWait) } : {},
  );
  return results.map((result): ShardAppendOutcome => {
    // The pipeline as a whole failed (e.g. the connection closed before it was sent): no replies.
    if ('error' in result) return { status: 'failed', error: result.error, replied: false };
    const [error, reply] = result.replies[0] ?? [new Error('no reply to the write'), undefined];
    if (error) return { status: 'failed', error, replied: isReplyError(error) };
    const [status, inEffect, message, ...ids] = reply as [string, number, string, ...string[]];
    if (status === 'OK')
      return replicaWait ? replicated(ids.map(String), result.tail[0], replicaWait) : { status: 'written', ids: ids.map(String) };
    if (status === 'REROUTE') return { status: 'reroute', shardCountInEffect: Number(inEffect) };
    if (status === 'UNROUTED') return { status: 'unrouted' };
    return { status: 'stopped', ids: ids.map(String), error: new Error(String(message)) };
  });
}

/** A write's outcome once WAIT answered: written, or written but not (yet) on enough replicas. */
function replicated(ids: string[], waitReply: [Error | null, unknown], wait: ReplicaWait): ShardAppendOutcome {
  const shortfall = waitShortfall(waitReply, wait);
  if (!shortfall) return { status: 'written', ids };
  return {
    status: 'unreplicated',
    ids,
    replicas: shortfall.replicas,
    error: new NotReplicatedError(
      `written on the master but not confirmed on its replicas: ${shortfall.why}; a failover now may lose it`,
      shortfall.replicas,
      wait.replicas,
    ),
  };
}

/** An error Redis answered with (as opposed to a connection or timeout error, where no reply came). */
export function isReplyError(error: Error): boolean {
  return error.name === 'ReplyError';
}
