import { ensureScripts, pipelineScript, type RedisClient, runScriptBySha } from '../redis/scripts';
import { NotReplicatedError, type ReplicaWait, waitCommand, waitShortfall } from '../redis/connection/replica-wait';
import { execBySlot, isCluster } from '../redis/connection/slot-pipelines';

/**
 * Entries per appendEntries call. A call is one script run: Redis does nothing else meanwhile, and
 * its reply and write-log record grow with it. 256 entries of at most 4 fields are at most
 * 8 + 256 × 8 = 2,056 arguments, far below Lua's unpack limit (about 8,000) should a script ever
 * unpack them, and a run of about a quarter of a millisecond; the per-call costs (routing check,
 * write log, Lua call) are spread over enough entries to stop mattering (docs/benchmarks.md).
 */
export const MAX_ENTRIES_PER_CALL = 256;

/** One call's part of a shard's writes: its keys and the entries' flat field lists, in order. */
export interface ShardAppend {
  shardIndex: number;
  stream: string;
  routing: string;
  /** The producer's write log on the shard, and this call's sequence number in it (unique per producer and shard). */
  writes: string;
  writeSeq: number;
  /** Field names and values; a binary codec's payload is bytes, stored as they are. */
  entries: (string | Buffer)[][];
  /** Each entry's due time: '' now, '+<ms>' after the call's Redis time, '@<epoch ms>' (appendEntries-5.lua). */
  dues: string[];
  /** The shard's schedule and its entries' fields, where a delayed entry waits until it is due. */
  schedule: string;
  scheduledEntries: string;
  /**
   * Each entry's order group in this call (appendEntries-5.lua): one number per key, 0 for an entry
   * without a key. After an entry fails, the later entries of its group are not attempted.
   */
  groups: number[];
  /** The shard channel published on once entries are written (on a Cluster, where members poll), or undefined. */
  wake?: string;
}

/**
 * Where an entry of a call whose routing check passed is: its stream id, or for a delayed entry its
 * schedule id and due time (Redis ms, `dueAt`).
 */
export interface EntryPlace {
  id: string;
  dueAt?: number;
}

/**
 * What became of one entry of a call whose routing check passed: where it is, Redis' error for its
 * write, or undefined when it was not attempted (an earlier entry of its order group failed).
 */
export type EntryResult = EntryPlace | Error | undefined;

/** What became of one call (appendEntries-5.lua). */
export type ShardAppendOutcome =
  /**
   * The shard takes writes with the routed count: `results` per entry, in order. `notReplicated`:
   * the written ones are on the master but WAIT counted fewer replicas than asked (a failover now may lose them).
   */
  | { status: 'applied'; results: EntryResult[]; notReplicated?: NotReplicatedError }
  /** Nothing written: the shard count in effect is not the routed one (or the shard takes no writes). */
  | { status: 'reroute'; shardCountInEffect: number }
  /**
   * Nothing written: the shard has no routing marker (Redis lost its keys, or the stream predates
   * markers), so the count in effect is unknown there; the metadata decides, and its markers are ensured.
   */
  | { status: 'unrouted' }
  /**
   * The call failed as a whole. `replied`: Redis answered with an error, so nothing was written;
   * otherwise the reply never came (connection lost, timeout) and the entries may or may not be in
   * the stream.
   */
  | { status: 'failed'; error: Error; replied: boolean };

/**
 * Runs the appends' `appendEntries` calls; each call's outcome is independent of the others', and
 * this never throws. One call alone, without a replica wait, is sent as it is, a plain EVALSHA
 * (`runScriptBySha`): a pipeline would buy nothing and cost its construction (ioredis copies every
 * defined script onto each one). Several on a single Redis without a replica wait go in one
 * `appendEntriesMany` call (per MAX_ENTRIES_PER_CALL entries): each shard's part is its own
 * appendEntries call inside it, and the Lua call and its reply are paid once. On a Cluster (each
 * shard has its own slot) one pipeline per call, sent side by side; with `replicaWait`, one
 * pipeline on a single Redis, and a `WAIT` follows on the same connection (once per pipeline).
 */
export async function appendToShards(
  client: RedisClient,
  routedCount: number,
  maxLenApprox: number | undefined,
  appends: readonly ShardAppend[],
  replicaWait?: ReplicaWait,
): Promise<ShardAppendOutcome[]> {
  const cap = maxLenApprox === undefined ? '' : String(maxLenApprox);
  if (appends.length === 1 && !replicaWait) return [await appendOne(client, routedCount, cap, appends[0])];
  if (!replicaWait && !isCluster(client)) {
    const outcomes = await Promise.all(mergedCalls(appends).map((parts) => appendMany(client, routedCount, cap, parts)));
    return outcomes.flat();
  }
  ensureScripts(client);
  const results = await execBySlot(
    client,
    appends.map((append) => ({
      build(pipeline) {
        pipelineScript(pipeline, 'appendEntries', scriptKeys(append), scriptArgs(append, routedCount, cap));
      },
    })),
    replicaWait ? { tail: (pipeline) => waitCommand(pipeline, replicaWait) } : {},
  );
  return results.map((result, i): ShardAppendOutcome => {
    // The pipeline as a whole failed (e.g. the connection closed before it was sent): no replies.
    if ('error' in result) return { status: 'failed', error: result.error, replied: false };
    const [error, reply] = result.replies[0] ?? [new Error('no reply to the write'), undefined];
    if (error) return { status: 'failed', error, replied: isReplyError(error) };
    const outcome = outcomeOf(reply, appends[i].entries.length);
    return replicaWait && outcome.status === 'applied' ? replicated(outcome, result.tail[0], replicaWait) : outcome;
  });
}

/** One shard's call, a plain EVALSHA. */
async function appendOne(client: RedisClient, routedCount: number, cap: string, append: ShardAppend): Promise<ShardAppendOutcome> {
  try {
    const reply = await runScriptBySha(client, 'appendEntries', scriptKeys(append), scriptArgs(append, routedCount, cap));
    return outcomeOf(reply, append.entries.length);
  } catch (error) {
    return callFailed(error as Error);
  }
}

/** The appends in order, grouped into calls of at most MAX_ENTRIES_PER_CALL entries (a longer append alone). */
function mergedCalls(appends: readonly ShardAppend[]): ShardAppend[][] {
  const calls: ShardAppend[][] = [];
  let call: ShardAppend[] = [];
  let entries = 0;
  for (const append of appends) {
    if (call.length > 0 && entries + append.entries.length > MAX_ENTRIES_PER_CALL) {
      calls.push(call);
      call = [];
      entries = 0;
    }
    call.push(append);
    entries += append.entries.length;
  }
  calls.push(call);
  return calls;
}

/** Several shards' calls as the parts of one `appendEntriesMany` call (appendEntriesMany-n.lua), each part's outcome its own. */
async function appendMany(client: RedisClient, routedCount: number, cap: string, parts: ShardAppend[]): Promise<ShardAppendOutcome[]> {
  if (parts.length === 1) return [await appendOne(client, routedCount, cap, parts[0])];
  const keys: string[] = [];
  const counts: (string | number | Buffer)[] = [parts.length];
  const values: (string | number | Buffer)[] = [];
  for (const part of parts) {
    for (const key of scriptKeys(part)) keys.push(key);
    const args = scriptArgs(part, routedCount, cap);
    counts.push(args.length);
    for (const arg of args) values.push(arg);
  }
  let replies: unknown;
  try {
    replies = await runScriptBySha(client, 'appendEntriesMany', keys, counts.concat(values));
  } catch (error) {
    return parts.map(() => callFailed(error as Error));
  }
  if (!Array.isArray(replies) || replies.length !== parts.length) {
    const error = new Error(`unexpected reply to appendEntriesMany: ${String(replies).slice(0, 200)}`);
    return parts.map((): ShardAppendOutcome => ({ status: 'failed', error, replied: true }));
  }
  return parts.map((part, i) => outcomeOf(replies[i], part.entries.length));
}

/** A call that failed as a whole: Redis' error (nothing written), or no reply (maybe written). */
function callFailed(error: Error): ShardAppendOutcome {
  return { status: 'failed', error, replied: isReplyError(error) };
}

function scriptKeys(append: ShardAppend): string[] {
  return [append.stream, append.routing, append.writes, append.schedule, append.scheduledEntries];
}

function scriptArgs(append: ShardAppend, routedCount: number, cap: string): (string | number | Buffer)[] {
  const { entries, dues, groups } = append;
  // Each entry's values go as they are; its count, order group and due time ride in three strings
  // (the script's ARGV[6] to ARGV[8]): Redis pays for every argument twice (appendEntries-5.lua).
  let layout = '';
  let delayed = false;
  for (let e = 0; e < entries.length; e++) {
    const digit = FIELD_COUNT_DIGITS[entries[e].length];
    if (digit === undefined) throw new RangeError(`an entry has 1 to 9 field values, got ${entries[e].length}`);
    layout += digit;
    if (dues[e] !== '') delayed = true;
  }
  const args: (string | number | Buffer)[] = [
    append.shardIndex,
    routedCount,
    cap,
    append.writeSeq,
    append.wake ?? '',
    layout,
    groups.join(' '),
    // No delayed entry (the common case): one empty string the script reads no further.
    delayed ? dues.map((due) => (due === '' ? '-' : due)).join(' ') : '',
  ];
  for (let e = 0; e < entries.length; e++) {
    const fields = entries[e];
    for (let f = 0; f < fields.length; f++) args.push(fields[f]);
  }
  return args;
}

/**
 * An entry's number of field values as the script's layout digit: an entry has at most 4 fields
 * (8 values, entry-format.ts); 1 to 9 pass as they are, so that XADD itself refuses an odd count.
 */
const FIELD_COUNT_DIGITS: readonly (string | undefined)[] = [undefined, '1', '2', '3', '4', '5', '6', '7', '8', '9'];

/** Reads the script's reply (one string: status, count in effect, outcomes, error lines). */
function outcomeOf(reply: unknown, entryCount: number): ShardAppendOutcome {
  const lines = String(reply).split('\n');
  const [status, inEffect, outcomes] = lines;
  if (status === 'REROUTE') return { status: 'reroute', shardCountInEffect: Number(inEffect) };
  if (status === 'UNROUTED') return { status: 'unrouted' };
  // A part of an appendEntriesMany call that raised Redis' error: as a call Redis answered with it.
  if (status === 'FAILED') return { status: 'failed', error: new Error(lines.slice(2).join('\n')), replied: true };
  if (status === 'SUPERSEDED') {
    // Only a resend of a call given up past its deadline: its first run's entries may be in the stream.
    return {
      status: 'failed',
      error: new Error('appendEntries: a resend of a call older than the last one on its shard, not run again'),
      replied: false,
    };
  }
  const tokens = outcomes === undefined || outcomes === '' ? [] : outcomes.split(' ');
  if (status !== 'OK' || tokens.length !== entryCount) {
    return { status: 'failed', error: new Error(`unexpected reply to appendEntries: ${String(reply).slice(0, 200)}`), replied: true };
  }
  let nextError = 3;
  const results: EntryResult[] = new Array(entryCount);
  for (let i = 0; i < entryCount; i++) {
    const token = tokens[i];
    if (token === 'S') results[i] = undefined;
    else if (token === 'E') results[i] = new Error(lines[nextError++] ?? 'the write failed');
    else results[i] = placeOf(token);
  }
  return { status: 'applied', results };
}

/** An outcome token that is not a failure: a stream id, or 's<16 digits>@<due ms>' for a scheduled entry. */
function placeOf(token: string): EntryPlace {
  const at = token.indexOf('@');
  return at < 0 ? { id: token } : { id: token.slice(0, at), dueAt: Number(token.slice(at + 1)) };
}

/** A call's outcome once WAIT answered: as it was, or with the shortfall when WAIT counted too few replicas. */
function replicated(
  outcome: Extract<ShardAppendOutcome, { status: 'applied' }>,
  waitReply: [Error | null, unknown],
  wait: ReplicaWait,
): ShardAppendOutcome {
  const shortfall = waitShortfall(waitReply, wait);
  if (!shortfall) return outcome;
  return {
    ...outcome,
    notReplicated: new NotReplicatedError(
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
