import { ensureScripts, pipelineScript, type RedisClient } from './scripts';

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
}

/** What became of one shard's part (appendEntries-3.lua). */
export type ShardAppendOutcome =
  /** Every entry written; `ids` in order. */
  | { status: 'written'; ids: string[] }
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
 * Writes each shard's entries with one `appendEntries` script call, all in one pipeline (one round
 * trip however many shards). The outcome of each shard is independent of the others'.
 */
export async function appendToShards(
  client: RedisClient,
  routedCount: number,
  maxLenApprox: number | undefined,
  appends: readonly ShardAppend[],
): Promise<ShardAppendOutcome[]> {
  ensureScripts(client);
  const pipeline = client.pipeline();
  const cap = maxLenApprox === undefined ? '' : String(maxLenApprox);
  for (const append of appends) {
    const args: (string | number | Buffer)[] = [append.shardIndex, routedCount, cap, append.writeSeq];
    for (const fields of append.entries) args.push(fields.length, ...fields);
    pipelineScript(pipeline, 'appendEntries', [append.stream, append.routing, append.writes], args);
  }
  let replies: [Error | null, unknown][];
  try {
    replies = ((await pipeline.exec()) ?? []) as [Error | null, unknown][];
  } catch (error) {
    // The pipeline as a whole failed (e.g. the connection closed before it was sent): no replies.
    return appends.map(() => ({ status: 'failed', error: error as Error, replied: false }));
  }
  return appends.map((_, i): ShardAppendOutcome => {
    const [error, reply] = replies[i] ?? [new Error('no reply to the write'), undefined];
    if (error) return { status: 'failed', error, replied: isReplyError(error) };
    const [status, inEffect, message, ...ids] = reply as [string, number, string, ...string[]];
    if (status === 'OK') return { status: 'written', ids: ids.map(String) };
    if (status === 'REROUTE') return { status: 'reroute', shardCountInEffect: Number(inEffect) };
    if (status === 'UNROUTED') return { status: 'unrouted' };
    return { status: 'stopped', ids: ids.map(String), error: new Error(String(message)) };
  });
}

/** An error Redis answered with (as opposed to a connection or timeout error, where no reply came). */
function isReplyError(error: Error): boolean {
  return error.name === 'ReplyError';
}
