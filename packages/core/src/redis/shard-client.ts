import type { Redis } from 'ioredis';
import { ENTRY_FIELD, NEVER_RAN } from '../protocol/entry-format';
import { MAX_SHARD_COUNT } from '../protocol/shard-count';
import type { KeyBuilder } from './keys';
import { findGroupInfo, isNoSuchKey, type StreamGroupInfo, trustedLag } from './responses';
import { withReadDeadline } from './connection/read-deadline';
import { packFields } from './packed-fields';
import { ParkBatches } from './park-batches';
import { readScheduleHeads } from './schedule-head';
import { ensureScripts, pipelineScript, type RedisClient, runScript, runScriptBuffer } from './scripts';
import { NotReplicatedError, type ReplicaWait, waitCommand, waitShortfall } from './connection/replica-wait';
import { execByNode, execBySlot, isCluster, type NodeBatch, type SlotBatchResult } from './connection/slot-pipelines';

/**
 * How many shards' keys a ShardClient keeps built (ShardClient.shardKeys): every shard a stream may
 * have, so a member of the largest stream never builds them twice; more would mean a shard index
 * outside the range, and the map is emptied rather than grown.
 */
const SHARD_KEYS_KEPT = MAX_SHARD_COUNT;

/** A raw stream entry: id and flat field list (text), and the payload's bytes as read. */
export interface RawEntry {
  id: string;
  fields: string[];
  payloadBytes?: Buffer;
}

/**
 * One page of a fenced takeover: the entries now pending under the caller, the cursor to go on
 * from ('0-0' when done), and ids that were pending but had been deleted from the stream (Redis
 * drops them from the pending list as it claims: they cannot be handled, only reported).
 */
export type ClaimResult = { fenced: true } | { fenced: false; cursor: string; entries: RawEntry[]; deleted: string[] };

/**
 * A due delayed entry waiting in its shard's schedule to move to its key's shard (releaseDue-8.lua):
 * its schedule id, move sequence number, stamp (the shard count and marker version it is routed
 * under), its key ('' when it has none: it stays) and its fields as the schedule keeps them.
 */
export interface WaitingMove {
  id: string;
  seq: string;
  count: number;
  version: number;
  key: string;
  fields: Buffer;
  /** Its due time (Redis ms): acceptMove-5.lua puts it in its key's shard's schedule when not due, or behind due entries there; '' from a version that did not stamp it. */
  dueAt: string;
}

/**
 * What a member settles of a waiting move in its next release call (ShardClient.releaseDue's
 * `settled`): 'd' written to its key's shard, 'r' refused there for a newer resize, 's' its key
 * routes to the source shard under its stamp, which it carries: a stay is released only while the
 * entry keeps that stamp (another group's owner may have stamped it again and moved it since).
 */
export function settledMove(outcome: 'd' | 'r' | 's', move: WaitingMove): string {
  return outcome === 's' ? `s${move.id}:${move.seq}:${move.count}:${move.version}` : `${outcome}${move.id}:${move.seq}`;
}

/** What one release call did (ShardClient.releaseDue). */
export interface ReleaseOutcome {
  released: number;
  nextDueInMs: number;
  /** The new states of the keys the call counted out of the group's deferred order, and the keys whose stale barrier it swept. */
  keyStates: KeyState[];
  swept: string[];
  /** Schedule ids of the group's due deferred or parked entries found without their fields (deleted from outside): dropped, counted out of their key. */
  lost: string[];
  /** Due entries the givers' bound held (releaseDue's `bound`): the caller reads it again and calls later. */
  heldDue: number;
  moves: WaitingMove[];
}

/**
 * What a shard's schedule says to the shards that received its keys in a resize (scheduleBound-2.lua):
 * the score of its first entry (null when it is empty; at or below 0 while one waits to move), and
 * whether its routing marker's latest count, of `version`, is in effect.
 */
export interface ScheduleBound {
  first: number | null;
  switched: boolean;
  version: number;
}

/** A shard claim: installed (reading goes on from `cursor`), or refused because `holder`'s token is newer. */
export type ShardClaim = { claimed: true; cursor: string } | { claimed: false; holder: string };

/** What one read returned per shard, and each shard's first entry after its cursor. */
export interface ReadResult {
  entries: Map<number, RawEntry[]>;
  /** shardIndex -> id of the first entry after the cursor passed in ('' when none). */
  firstAfter: Map<number, string>;
}

/**
 * A shard's fencing token: "<incarnation>:<grantEpoch>:<memberId>". claimShard-2.lua compares
 * (incarnation, epoch), so a recreated group (a larger incarnation) always wins over tokens of its
 * former life and never loses to them, whatever the epochs (SPEC 9.3). The one place tokens are built.
 */
export function fenceToken(incarnation: string, grantEpoch: number, memberId: string): string {
  return `${incarnation}:${grantEpoch}:${memberId}`;
}

/**
 * Sends shards' batches of commands, each batch's replies on their own (ClusterReadHub: one pipeline
 * per node); rejects when they did not all come back within `deadlineMs`.
 */
export interface BatchSender {
  exec(batches: readonly NodeBatch[], deadlineMs: number): Promise<SlotBatchResult[]>;
}

/** One shard's acknowledgements under one grant (ShardClient.ackMany). */
export interface AckBatch {
  shardIndex: number;
  grantEpoch: number;
  ids: string[];
}

/**
 * What became of one shard's batch in `ackMany`: how many entries it acknowledged (-1: a newer
 * owner's token refused it), with the replicas' shortfall when `ackWait` counted too few; or the
 * error its own XACK raised (some of its ids may have landed: sending them again is harmless).
 */
export type ShardAck = { acked: number; notReplicated?: NotReplicatedError } | { failed: Error };

/** A reply of ackFencedMany-n.lua for one shard: a count, or the message of the error its XACK raised. */
function toShardAck(reply: unknown): ShardAck {
  return typeof reply === 'string' ? { failed: new Error(reply) } : { acked: Number(reply) };
}

function notReplicatedError(why: string, replicas: number, wanted: number): NotReplicatedError {
  return new NotReplicatedError(`acknowledged on the master but not confirmed on its replicas: ${why}`, replicas, wanted);
}

function toEntries(raw: unknown): RawEntry[] {
  const out: RawEntry[] = [];
  for (const item of (raw as [string, string[] | null][]) ?? []) {
    // Replies are text already (a copy only for anything else, e.g. a Buffer reply).
    if (item?.[1])
      out.push({ id: String(item[0]), fields: item[1].every((field) => typeof field === 'string') ? item[1] : item[1].map(String) });
  }
  return out;
}

/** The codec an entry names (`c`), or undefined. */
function entryCodec(fields: readonly string[]): string | undefined {
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === ENTRY_FIELD.codec) return fields[i + 1];
  return undefined;
}

/** The payload as base64 when its bytes are not the UTF-8 of its text (a binary codec's), else undefined. */
function binaryPayload(entry: RawEntry): string | undefined {
  const bytes = entry.payloadBytes;
  if (bytes === undefined) return undefined;
  const index = entry.fields.indexOf(ENTRY_FIELD.payload);
  const text = index >= 0 && index % 2 === 0 ? entry.fields[index + 1] : undefined;
  return text !== undefined && Buffer.from(text, 'utf8').equals(bytes) ? undefined : bytes.toString('base64');
}

/** An entry's origin as parkFenced-5.lua takes it. */
const ORIGIN_ARGUMENT = { original: 'o', released: 'r', reappended: 'a' } as const;

/** The fields a deferred retry keeps of its entry (the rest are not read by a member): at most 8 values, then `g` and `a`. */
const DEFERRED_FIELDS: ReadonlySet<string> = new Set([ENTRY_FIELD.payload, ENTRY_FIELD.codec, ENTRY_FIELD.key, ENTRY_FIELD.headers]);

/**
 * The fields a deferred or parked entry is released with: only the fields an entry is read by
 * (entry-format.ts), each once, then its group and the attempts it has used (none: NEVER_RAN,
 * deferralOf; an entry appended again gets `r` beside them in parkFenced-5.lua). An entry written by other code may carry any number more, or repeat one thousands of
 * times, and the release unpacks the fields it stores (SPEC 10.7; deferFenced-5.lua and
 * parkFenced-5.lua refuse more). Of a repeated field the last is kept, the one decodeEntry reads.
 */
function deferredFields(entry: RawEntry, consumerGroup: string, attempts: number): (string | Buffer)[] {
  const kept = new Map<string, string | Buffer>();
  for (let i = 0; i + 1 < entry.fields.length; i += 2) {
    const name = entry.fields[i];
    if (!DEFERRED_FIELDS.has(name)) continue;
    // A binary payload's text is not its bytes: it is released with the bytes it was written with.
    kept.set(name, name === ENTRY_FIELD.payload && entry.payloadBytes !== undefined ? entry.payloadBytes : entry.fields[i + 1]);
  }
  const fields: (string | Buffer)[] = [...kept].flat();
  fields.push(ENTRY_FIELD.deferredFor, consumerGroup);
  if (attempts === 0) fields.push(ENTRY_FIELD.attempts, NEVER_RAN.attempts, ENTRY_FIELD.parked, NEVER_RAN.parked);
  else fields.push(ENTRY_FIELD.attempts, String(attempts));
  return fields;
}

/**
 * A key's state in a group's deferred order on a shard (lua/includes/keyOrder.lua): its key field
 * ('k' and the routing key, '-' without one), how many of its entries wait in the group's deferred
 * schedule, their due time (Redis ms), whether its release stopped part way, its floor and its
 * barrier (the stream id of its last released entry once none waits, '' for none).
 */
export interface KeyState {
  field: string;
  count: number;
  due: number;
  partial: boolean;
  /** The stream id of the first copy released since its last deferral, '' before any. */
  floor: string;
  /** The stream id of its last released copy, '' before any. */
  released: string;
  /** The stream id of its last copy appended to the stream (released or appended again), '' before any. */
  barrier: string;
}

/** A key state as a script replies it: field, count, due, partial, floor, released, barrier. */
function keyStateOf(reply: unknown[]): KeyState {
  return {
    field: String(reply[0]),
    count: Number(reply[1]),
    due: Number(reply[2]),
    partial: Number(reply[3]) === 1,
    floor: String(reply[4] ?? ''),
    released: String(reply[5] ?? ''),
    barrier: String(reply[6] ?? ''),
  };
}

/** A key state as the hash stores it ("count|due|partial|floor|released|barrier"), or undefined when it is no state. */
function parseKeyState(field: string, value: string): KeyState | undefined {
  const match = /^(\d+)\|(\d+)\|([01])\|([0-9-]*)\|([0-9-]*)\|([0-9-]*)$/.exec(value);
  if (!match) return undefined;
  return {
    field,
    count: Number(match[1]),
    due: Number(match[2]),
    partial: match[3] === '1',
    floor: match[4],
    released: match[5],
    barrier: match[6],
  };
}

/**
 * The shard-side operations of one member on one group: fencing, reading, acknowledging, taking over
 * pending work, dead-lettering. Every call touches keys of one shard's hash slot only (Cluster-safe),
 * except `readNew` and `ackMany`, which read or acknowledge several shards in one call on a single
 * Redis (on a Cluster, `readEach` and `ackMany` send each shard's commands on their own, the shards
 * of one node in one pipeline).
 */
/** The group's position on a shard and what waits in its schedules, for the metrics (ShardClient.groupPositions). */
export interface GroupShardPosition extends Pick<StreamGroupInfo, 'lag' | 'pending'> {
  /** Delayed entries in the shard's schedule (every group's). */
  scheduled: number;
  /** The group's deferred retries on the shard. */
  deferred: number;
  /** The group's entries parked on the shard behind their key's deferred retries (deferredOrder 'key'). */
  parked: number;
  /** How late the earliest due entry of the two schedules is (Redis' clock), 0 when none is due: a release that does not keep up. */
  dueLagMs: number;
}

export class ShardClient {
  constructor(
    private readonly redis: RedisClient,
    private readonly keys: KeyBuilder,
    readonly streamPrefix: string,
    readonly consumerGroup: string,
    readonly memberId: string,
    options: {
      /** `WAIT` after each ack batch (the member's `ackWaitForReplicas`). */
      ackWait?: ReplicaWait;
      /**
       * The connection acks with `ackWait` go on (WAIT must follow the XACK on one connection, and
       * holds it up to its timeout: other calls must not queue behind it). Default: `redis`.
       */
      ackClient?: RedisClient;
      /**
       * Codecs whose payloads are text ('' for entries that name none, when the member's own codec
       * is text): entries of any other codec (binary, or not known here) get their payload's bytes
       * fetched beside the text (`withPayloadBytes`).
       */
      textCodecs?: ReadonlySet<string>;
    } = {},
  ) {
    this.ackWait = options.ackWait;
    this.ackClient = options.ackClient ?? redis;
    this.textCodecs = options.textCodecs ?? new Set(['json', '']);
  }

  private readonly ackWait: ReplicaWait | undefined;
  private readonly ackClient: RedisClient;
  private readonly textCodecs: ReadonlySet<string>;

  /**
   * Reads are text replies: a JSON entry costs nothing extra. The UTF-8 text of arbitrary bytes is
   * not those bytes, so entries of a binary (or unknown) codec get their payload's bytes in Buffer
   * replies, per shard and read: one XRANGE over their id range, bounded to as many entries as the
   * batch holds there (a read's entries are the stream's, so that is all of them). Entries far apart
   * (a takeover or a sweep: an old entry still pending beside recent ones) are not contiguous in the
   * stream: those the bounded range did not reach are fetched by id, never the stream between them.
   * An entry deleted meanwhile keeps only its text (it decodes as garbage and is dead-lettered,
   * never skipped).
   */
  private async withPayloadBytes(shardIndex: number, entries: RawEntry[]): Promise<RawEntry[]> {
    let first = -1;
    let last = -1;
    entries.forEach((entry, i) => {
      if (this.textCodecs.has(entryCodec(entry.fields) ?? '')) return;
      if (first < 0) first = i;
      last = i;
    });
    if (first < 0) return entries;
    const [stream] = this.shardKeys(shardIndex);
    const bytes = new Map<string, Buffer>();
    const collect = (rows: [Buffer, Buffer[]][]) => {
      for (const [id, values] of rows) {
        for (let i = 0; i + 1 < values.length; i += 2) {
          if (values[i].length === 1 && values[i].toString() === ENTRY_FIELD.payload) bytes.set(id.toString(), values[i + 1]);
        }
      }
    };
    collect(await this.redis.xrangeBuffer(stream, entries[first].id, entries[last].id, 'COUNT', last - first + 1));
    const missing = entries
      .slice(first, last + 1)
      .filter((entry) => !bytes.has(entry.id) && !this.textCodecs.has(entryCodec(entry.fields) ?? ''));
    if (missing.length > 0) {
      const replies = await Promise.all(missing.map((entry) => this.redis.xrangeBuffer(stream, entry.id, entry.id)));
      for (const rows of replies) collect(rows);
    }
    return entries.map((entry) => {
      const payloadBytes = bytes.get(entry.id);
      return payloadBytes === undefined ? entry : { ...entry, payloadBytes };
    });
  }

  /** The group's incarnation as of the member's last successful heartbeat (HeartbeatResponse.incarnation). */
  private incarnation = '0';

  /** Set by the member from each successful heartbeat; every later token carries it. */
  setIncarnation(incarnation: string): void {
    this.incarnation = incarnation;
  }

  private token(grantEpoch: number): string {
    return fenceToken(this.incarnation, grantEpoch, this.memberId);
  }

  /** The shard channel a producer's write publishes on (Cluster only: members poll there). */
  wakeChannel(shardIndex: number): string {
    return this.keys.shardWakeChannel(this.streamPrefix, shardIndex);
  }

  /**
   * shardIndex -> its stream and fencing-token keys, built (their names checked) once, not on every
   * read and ack of the shard. At most SHARD_KEYS_KEPT shards (emptied when full), the largest
   * shard count a stream may have.
   */
  private readonly keysOf = new Map<number, [string, string]>();

  private shardKeys(shardIndex: number): [string, string] {
    let keys = this.keysOf.get(shardIndex);
    if (keys === undefined) {
      if (this.keysOf.size >= SHARD_KEYS_KEPT) this.keysOf.clear();
      keys = [
        this.keys.shardStream(this.streamPrefix, shardIndex),
        this.keys.shardFence(this.streamPrefix, shardIndex, this.consumerGroup),
      ];
      this.keysOf.set(shardIndex, keys);
    }
    return keys;
  }

  /**
   * Moves up to `count` due entries of the shard's schedule, and of this group's deferred retries and
   * parked entries on it, into its stream (releaseDue-8.lua), under this member's fencing token, first
   * settling what the member reports of the entries waiting to move (`settled`, in their order:
   * settledMove: done, stays under its stamp, refused). How many were released, how long
   * until the next is due (0: more are due now; -1: the schedule is empty), the new states of the keys
   * it counted out, the keys whose stale barrier it swept, and the first entries waiting to move
   * (their key's shard may be another now); or null when the shard has a newer owner (nothing moved).
   * `bound`: only schedule entries scored below it are released (ScheduleGivers: the first entry
   * still waiting on a shard that gave this one keys in a resize); undefined for none.
   * `historyVersion`: the stream metadataVersion that bound was computed from; a shard whose
   * routing marker is newer releases nothing of its schedule (the caller has not read that resize).
   */
  async releaseDue(
    shardIndex: number,
    grantEpoch: number,
    count: number,
    settled = '',
    bound?: number,
    historyVersion?: number,
  ): Promise<ReleaseOutcome | null> {
    const [stream, fence] = this.shardKeys(shardIndex);
    const reply = (await runScriptBuffer(
      this.redis,
      'releaseDue',
      [
        stream,
        fence,
        this.keys.shardSchedule(this.streamPrefix, shardIndex),
        this.keys.shardScheduledEntries(this.streamPrefix, shardIndex),
        ...this.deferredKeys(shardIndex),
        this.keys.shardRouting(this.streamPrefix, shardIndex),
      ],
      [
        this.token(grantEpoch),
        count,
        isCluster(this.redis) ? this.wakeChannel(shardIndex) : '',
        settled,
        shardIndex,
        this.consumerGroup,
        '',
        bound === undefined || bound === Number.POSITIVE_INFINITY ? '' : String(bound),
        historyVersion === undefined ? '' : String(historyVersion),
      ],
    )) as (number | Buffer | unknown[])[];
    if (Number(reply[0]) === -1) return null;
    const flat = (reply[2] ?? []) as unknown[];
    const keyStates: KeyState[] = [];
    for (let i = 0; i + 6 < flat.length; i += 7) keyStates.push(keyStateOf(flat.slice(i, i + 7)));
    const swept = ((reply[3] ?? []) as unknown[]).map(String);
    const lost = ((reply[4] ?? []) as unknown[]).map(String);
    const moves: WaitingMove[] = [];
    for (let i = 6; i + 6 < reply.length; i += 7) {
      moves.push({
        id: String(reply[i]),
        seq: String(reply[i + 1]),
        count: Number(reply[i + 2]),
        version: Number(reply[i + 3]),
        key: String(reply[i + 4]),
        fields: reply[i + 5] as Buffer,
        dueAt: String(reply[i + 6]),
      });
    }
    return { released: Number(reply[0]), nextDueInMs: Number(reply[1]), keyStates, swept, lost, heldDue: Number(reply[5] ?? 0), moves };
  }

  /** A shard's schedule as the shards that received its keys in a resize see it (scheduleBound-2.lua), read-only. */
  async scheduleBound(shardIndex: number): Promise<ScheduleBound> {
    const reply = (await runScript(
      this.redis,
      'scheduleBound',
      [this.keys.shardSchedule(this.streamPrefix, shardIndex), this.keys.shardRouting(this.streamPrefix, shardIndex)],
      [],
    )) as (string | number | Buffer)[];
    const first = String(reply[0]);
    return { first: first === '' ? null : Number(first), switched: Number(reply[1]) === 1, version: Number(reply[2]) };
  }

  /**
   * The first step of a move (acceptMove-5.lua): writes a due delayed entry of shard `fromShard`
   * to the end of `shardIndex`'s stream (one not due yet to its schedule), under its stamp, once per
   * move sequence number: the new id, 'DONE' (it landed before), 'REFUSED' (a newer resize there:
   * stamp it again) or 'WAIT'.
   */
  async acceptMove(shardIndex: number, fromShard: number, move: WaitingMove): Promise<string> {
    const [stream] = this.shardKeys(shardIndex);
    const reply = await runScript(
      this.redis,
      'acceptMove',
      [
        stream,
        this.keys.shardRouting(this.streamPrefix, shardIndex),
        this.keys.shardMovesTaken(this.streamPrefix, shardIndex),
        this.keys.shardSchedule(this.streamPrefix, shardIndex),
        this.keys.shardScheduledEntries(this.streamPrefix, shardIndex),
      ],
      [
        fromShard,
        move.seq,
        move.count,
        move.version,
        shardIndex,
        move.fields,
        isCluster(this.redis) ? this.wakeChannel(shardIndex) : '',
        move.dueAt,
      ],
    );
    return String(reply);
  }

  /** The group's deferred schedule of a shard, its entries and its key states (deferFenced-5.lua, parkFenced-5.lua, releaseDue-8.lua). */
  private deferredKeys(shardIndex: number): [string, string, string] {
    return [
      this.keys.shardDeferred(this.streamPrefix, shardIndex, this.consumerGroup),
      this.keys.shardDeferredEntries(this.streamPrefix, shardIndex, this.consumerGroup),
      this.keys.shardDeferredKeys(this.streamPrefix, shardIndex, this.consumerGroup),
    ];
  }

  /**
   * A deferred retry (deferFenced-5.lua): acknowledges the entry and schedules it in this group's
   * deferred schedule of the shard, `delayMs` from Redis' now, with `attempts` (the attempts it has
   * used) and the group in its fields, under this member's fencing token; counted in its key's state
   * when `keyField` is given (deferredOrder 'key'). The due time (Redis ms), '' when the entry was no
   * longer pending (a resent call whose first run landed), 'busy' when its key still counts entries
   * (nothing written: the caller retries in place), and the key's state then; null when the
   * shard has a newer owner (nothing scheduled, nothing acknowledged).
   */
  async defer(
    shardIndex: number,
    grantEpoch: number,
    entry: RawEntry,
    attempts: number,
    delayMs: number,
    keyField?: string,
  ): Promise<{ dueAt: number | '' | 'busy'; keyState: KeyState | undefined } | null> {
    const [stream, fence] = this.shardKeys(shardIndex);
    const fields = deferredFields(entry, this.consumerGroup, attempts);
    const [schedule, entries, keyStates] = this.deferredKeys(shardIndex);
    const reply = await runScript(
      this.redis,
      'deferFenced',
      [stream, fence, schedule, entries, keyStates],
      [this.consumerGroup, this.token(grantEpoch), entry.id, delayMs, keyField ?? '', packFields(fields)],
    );
    if (!Array.isArray(reply)) return null;
    const state = reply[1] as unknown[];
    return {
      dueAt: reply[0] === '' || reply[0] === 'busy' ? reply[0] : Number(reply[0]),
      keyState: state.length === 7 ? keyStateOf(state) : undefined,
    };
  }

  /**
   * Keeps an entry in its key's order behind the key's deferred entries (parkFenced-5.lua, which
   * decides on the key's state), under this member's fencing token: 'park' (acknowledged and put in
   * the group's schedule), 'reappend' (acknowledged and appended again at the stream end), 'hold'
   * or 'run' (nothing written), '' (no longer pending: a resent call whose first run landed), with
   * the key's state; null when the shard has a newer owner (nothing written, nothing acknowledged).
   * `attempts` (the attempts it has used, 0 for an entry never run) travels with it. Asked with
   * the other parks of the turn on the shard, in one call (ParkBatches); a write that failed for
   * it (or for an entry asked before it in that call) rejects with Redis' error.
   */
  async park(
    shardIndex: number,
    grantEpoch: number,
    entry: RawEntry,
    attempts: number,
    keyField: string,
    origin: 'original' | 'released' | 'reappended',
  ): Promise<{ outcome: 'park' | 'reappend' | 'hold' | 'run' | ''; keyState: KeyState } | null> {
    const fields = deferredFields(entry, this.consumerGroup, attempts);
    const reply = await this.parks.ask(shardIndex, grantEpoch, [entry.id, keyField, ORIGIN_ARGUMENT[origin], packFields(fields)]);
    if (reply === null) return null;
    return { outcome: String(reply[0]) as 'park' | 'reappend' | 'hold' | 'run' | '', keyState: keyStateOf(reply[1] as unknown[]) };
  }

  /** The flush of parks an ask made now goes out with (ParkBatches.turn): asks of one flush are decided in one go, in order. */
  get parkTurn(): number {
    return this.parks.turn;
  }

  /** The parks of a turn, one parkFenced-5.lua call per shard and grant (ParkBatches). */
  private readonly parks = new ParkBatches((shardIndex, grantEpoch, args) => {
    const [stream, fence] = this.shardKeys(shardIndex);
    return runScript(
      this.redis,
      'parkFenced',
      [stream, fence, ...this.deferredKeys(shardIndex)],
      [this.consumerGroup, this.token(grantEpoch), ...args],
    );
  });

  /**
   * The group's key states on a shard (deferredOrder 'key'), read in HSCAN pages of `pageSize`
   * until the hash is read or `cap` states are: `complete` says whether every state was read (the
   * caller bounds the whole read).
   */
  async loadKeyStates(shardIndex: number, cap: number, pageSize: number): Promise<{ keyStates: KeyState[]; complete: boolean }> {
    const key = this.keys.shardDeferredKeys(this.streamPrefix, shardIndex, this.consumerGroup);
    const keyStates: KeyState[] = [];
    let cursor = '0';
    do {
      const [next, flat] = await this.redis.hscan(key, cursor, 'COUNT', pageSize);
      for (let i = 0; i + 1 < flat.length; i += 2) {
        if (flat[i].startsWith('#')) continue;
        const state = parseKeyState(flat[i], flat[i + 1]);
        if (state) keyStates.push(state);
      }
      cursor = next;
      if (keyStates.length >= cap) return { keyStates: keyStates.slice(0, cap), complete: false };
    } while (cursor !== '0');
    return { keyStates, complete: true };
  }

  /**
   * Installs this member's token for a shard it was granted: the group's last-delivered id on the
   * shard (where this member reads on from), or the token that is there when a newer owner holds it.
   */
  async claimShard(shardIndex: number, grantEpoch: number): Promise<ShardClaim> {
    const [stream, fence] = this.shardKeys(shardIndex);
    const reply = (await runScript(this.redis, 'claimShard', [fence, stream], [this.consumerGroup, this.token(grantEpoch)])) as unknown[];
    return Number(reply[0]) === 1 ? { claimed: true, cursor: String(reply[1]) } : { claimed: false, holder: String(reply[1]) };
  }

  /**
   * XACK under the fencing token: the number acknowledged, or -1 when the shard was lost. With
   * `ackWait`, WAIT follows on the same connection; `notReplicated` says when it counted too few.
   */
  async ack(shardIndex: number, grantEpoch: number, ids: string[]): Promise<{ acked: number; notReplicated?: NotReplicatedError }> {
    const [stream, fence] = this.shardKeys(shardIndex);
    const args = [this.consumerGroup, this.token(grantEpoch), ...ids];
    const wait = this.ackWait;
    if (!wait) return { acked: Number(await runScript(this.redis, 'ackFenced', [stream, fence], args)) };
    ensureScripts(this.ackClient);
    const [result] = await execBySlot(
      this.ackClient,
      [{ build: (pipeline) => pipelineScript(pipeline, 'ackFenced', [stream, fence], args) }],
      { tail: (pipeline) => waitCommand(pipeline, wait) },
    );
    if ('error' in result) throw result.error;
    const [error, reply] = result.replies[0];
    if (error) throw error;
    const acked = Number(reply);
    const shortfall = acked > 0 ? waitShortfall(result.tail[0], wait) : undefined;
    if (!shortfall) return { acked };
    return { acked, notReplicated: notReplicatedError(shortfall.why, shortfall.replicas, wait.replicas) };
  }

  /**
   * Acknowledges the entries of several shards in one fenced call (ackFencedMany-n.lua), each shard
   * under its own token: per batch, what became of it (`ShardAck`). A shard that was lost, or whose
   * XACK failed, is that shard's result alone: the others are acknowledged all the same, and said to
   * be. With `ackWait`, WAIT follows on the same connection. On a Cluster see `ackByNode`; a single
   * batch anywhere is one `ack`. Rejects only when the call as a whole failed (no reply: nothing is
   * known of any shard).
   */
  async ackMany(batches: readonly AckBatch[]): Promise<ShardAck[]> {
    if (batches.length === 1) return [await this.ack(batches[0].shardIndex, batches[0].grantEpoch, batches[0].ids)];
    if (isCluster(this.redis)) return this.ackByNode(batches);
    const keys: string[] = [];
    const args: (string | number)[] = [this.consumerGroup];
    for (const { shardIndex, grantEpoch, ids } of batches) {
      keys.push(...this.shardKeys(shardIndex));
      args.push(this.token(grantEpoch), ids.length, ...ids);
    }
    const wait = this.ackWait;
    if (!wait) {
      const reply = (await runScript(this.redis, 'ackFencedMany', keys, args)) as unknown[];
      return batches.map((_, i) => toShardAck(reply[i]));
    }
    // WAIT blocks its connection: on the acknowledgements' own, not the one heartbeats use.
    ensureScripts(this.ackClient);
    const pipeline = (this.ackClient as Redis).pipeline();
    pipelineScript(pipeline, 'ackFencedMany', keys, args);
    waitCommand(pipeline, wait);
    const [[error, reply], waitReply] = (await pipeline.exec()) as [Error | null, unknown][];
    if (error) throw error;
    const results = batches.map((_, i) => toShardAck((reply as unknown[])[i]));
    const landed = (result: ShardAck) => 'acked' in result && result.acked > 0;
    const shortfall = results.some(landed) ? waitShortfall(waitReply, wait) : undefined;
    if (!shortfall) return results;
    const notReplicated = notReplicatedError(shortfall.why, shortfall.replicas, wait.replicas);
    return results.map((result) => (landed(result) ? { ...result, notReplicated } : result));
  }

  /**
   * `ackMany` on a Cluster. A script may touch one slot there, and each shard has its own, so one
   * fenced call cannot cover two shards: each shard's ackFenced script is sent on its own, and the
   * scripts of the shards one node serves go in one pipeline (one write, one round trip per node;
   * with `ackWait`, one WAIT per node after them, counting that node's replicas for all of them).
   * Each shard's result is its own: a newer owner's token refuses that shard only (-1), and a shard
   * whose slot moved is sent again alone, to its new node (execByNode). (Not one script per node
   * with the `allow-cross-slot-keys` flag: it would reach the other shards' keys undeclared, which
   * the cluster cannot route or check, and a slot migrating under it fails the whole call.)
   *
   * A shard whose call failed (its node gave no reply, a connection lost, an error) is that shard's
   * result alone: the shards other nodes acknowledged are reported acknowledged, and the AckBatcher
   * sends only the failed ones again (a fenced XACK of an id already acknowledged counts 0 and
   * changes nothing), then leaves them pending for the own-pending sweep.
   */
  private async ackByNode(batches: readonly AckBatch[]): Promise<ShardAck[]> {
    const wait = this.ackWait;
    const client = wait ? this.ackClient : this.redis;
    ensureScripts(client);
    const results = await execByNode(
      client,
      batches.map(({ shardIndex, grantEpoch, ids }) => {
        const [stream, fence] = this.shardKeys(shardIndex);
        return {
          key: stream,
          build: (pipeline) => pipelineScript(pipeline, 'ackFenced', [stream, fence], [this.consumerGroup, this.token(grantEpoch), ...ids]),
        };
      }),
      wait ? { tail: (pipeline) => waitCommand(pipeline, wait) } : {},
    );
    return results.map((result): ShardAck => {
      if ('error' in result) return { failed: result.error };
      const [error, reply] = result.replies[0];
      if (error) return { failed: error };
      const acked = Number(reply);
      const shortfall = wait && acked > 0 ? waitShortfall(result.tail[0], wait) : undefined;
      return shortfall ? { acked, notReplicated: notReplicatedError(shortfall.why, shortfall.replicas, wait!.replicas) } : { acked };
    });
  }

  /**
   * One page of a fenced takeover (see claimPending-2.lua for the modes 'all' and 'others'). In mode
   * 'others' the cursor is '0-0' when every other consumer's entry was taken, else the id up to
   * which they were (the ones left are newer).
   */
  async claimPending(shardIndex: number, grantEpoch: number, mode: 'all' | 'others', cursor: string, count: number): Promise<ClaimResult> {
    return this.claim(shardIndex, grantEpoch, [mode, cursor, count]);
  }

  /**
   * One page of the entries pending (for any consumer) from `fromId` (inclusive) up to `beforeId`
   * (exclusive), taken over under the fencing token; nothing at or past `beforeId` moves.
   */
  async claimPendingRange(shardIndex: number, grantEpoch: number, fromId: string, beforeId: string, count: number): Promise<ClaimResult> {
    return this.claim(shardIndex, grantEpoch, ['range', fromId, count, beforeId]);
  }

  /** Claims these entries again under the fencing token (this member's own, which it lost track of). */
  async claimIds(shardIndex: number, grantEpoch: number, ids: string[]): Promise<ClaimResult> {
    return this.claim(shardIndex, grantEpoch, ['ids', '0-0', ids.length, ...ids]);
  }

  private async claim(shardIndex: number, grantEpoch: number, modeArgs: (string | number)[]): Promise<ClaimResult> {
    const [stream, fence] = this.shardKeys(shardIndex);
    const reply = (await runScript(
      this.redis,
      'claimPending',
      [stream, fence],
      [this.consumerGroup, this.token(grantEpoch), this.memberId, ...modeArgs],
    )) as unknown[];
    if (Number(reply[0]) === -1) return { fenced: true };
    const entries = await this.withPayloadBytes(shardIndex, toEntries(reply[2]));
    return { fenced: false, cursor: String(reply[1]), entries, deleted: ((reply[3] as unknown[]) ?? []).map(String) };
  }

  /**
   * The group's lag and pending count on each of `shards`, one XINFO GROUPS per shard sent together
   * (one round trip on a single Redis; on a Cluster each goes to its shard's node), and the last
   * entry of each (XREVRANGE), against which the lag is checked (trustedLag). A shard whose
   * stream does not exist yet has neither; one the group has never read has an unknown lag (null).
   * Beside them, what waits in the shard's schedule and the group's deferred retries, and how late
   * the earliest due of them is by Redis' clock (`dueLagMs`, 0 when none is due): one read-only
   * script per shard (readScheduleHeads-3.lua, in the shard's slot), and one TIME.
   */
  async groupPositions(shards: readonly number[]): Promise<Map<number, GroupShardPosition>> {
    const [replies, lastEntries, schedules, now] = await Promise.all([
      Promise.all(
        shards.map((shard) =>
          this.redis.xinfo('GROUPS', this.keys.shardStream(this.streamPrefix, shard)).catch((error: unknown) => {
            if (isNoSuchKey(error)) return [];
            throw error;
          }),
        ),
      ),
      // Each stream's last entry: a group delivered it has no lag, whatever XINFO says (trustedLag).
      Promise.all(shards.map((shard) => this.redis.xrevrange(this.keys.shardStream(this.streamPrefix, shard), '+', '-', 'COUNT', 1))),
      Promise.all(
        shards.map((shard) =>
          readScheduleHeads(
            this.redis,
            this.keys.shardSchedule(this.streamPrefix, shard),
            this.keys.shardDeferred(this.streamPrefix, shard, this.consumerGroup),
            this.keys.shardDeferredKeys(this.streamPrefix, shard, this.consumerGroup),
          ),
        ),
      ),
      this.redis.time(),
    ]);
    const nowMs = Number(now[0]) * 1000 + Math.floor(Number(now[1]) / 1000);
    const positions = new Map<number, GroupShardPosition>();
    shards.forEach((shard, i) => {
      const info = findGroupInfo(replies[i], this.consumerGroup);
      const { scheduled, deferred, parked } = schedules[i];
      const firstDue = Math.min(scheduled.firstDueAt ?? Infinity, deferred.firstDueAt ?? Infinity);
      positions.set(shard, {
        ...(info
          ? { lag: trustedLag(info, lastEntries[i][0]?.[0]), pending: info.pending }
          : { lag: (replies[i] as unknown[]).length === 0 ? 0 : null, pending: 0 }),
        scheduled: scheduled.count,
        deferred: deferred.count,
        parked,
        dueLagMs: Number.isFinite(firstDue) ? Math.max(0, nowMs - firstDue) : 0,
      });
    });
    return positions;
  }

  /** Ids of up to `count` entries pending under this member on a shard, in ID order. */
  async ownPending(shardIndex: number, count: number): Promise<string[]> {
    const [stream] = this.shardKeys(shardIndex);
    const pending = (await this.redis.xpending(stream, this.consumerGroup, '-', '+', count, this.memberId)) as [
      string,
      string,
      number,
      number,
    ][];
    return pending.map(([id]) => String(id));
  }

  /** Redis' delivery counts of pending entries of this member on a shard (for redelivered entries). */
  async deliveryCounts(shardIndex: number, fromId: string, toId: string, count: number): Promise<Map<string, number>> {
    const [stream] = this.shardKeys(shardIndex);
    const pending = (await this.redis.xpending(stream, this.consumerGroup, fromId, toId, count, this.memberId)) as [
      string,
      string,
      number,
      number,
    ][];
    return new Map(pending.map(([id, , , deliveries]) => [String(id), Number(deliveries)]));
  }

  /**
   * XREADGROUP of new entries ('>') of several shards with `firstAfter-n.lua` in the same pipeline:
   * it runs the moment the read returns, at no extra round trip, and tells for each shard which
   * entry follows `cursors[i]`. When a batch does not start there, the entries in between went to
   * another consumer of the group (a zombie's read that reached Redis late) or to this member in a
   * reply it never got. With `blockMs` the read blocks (on a connection nothing else uses: a member
   * alone on its ReadHub) and its entries are empty after the block timed out or was cut short
   * (CLIENT UNBLOCK); without, it does not block (the hub's shared read connection). Rejects with
   * ReadDeadlineError when nothing came back within `deadlineMs` (the connection is reset then; see
   * withReadDeadline).
   */
  async readNew(
    reader: Redis,
    shards: number[],
    cursors: string[],
    countPerShard: number,
    blockMs: number | undefined,
    deadlineMs: number,
  ): Promise<ReadResult> {
    const streams = shards.map((s) => this.shardKeys(s)[0]);
    ensureScripts(reader);
    const pipeline = reader.pipeline();
    const ids = shards.map(() => '>');
    if (blockMs === undefined)
      pipeline.xreadgroup('GROUP', this.consumerGroup, this.memberId, 'COUNT', countPerShard, 'STREAMS', ...streams, ...ids);
    else
      pipeline.xreadgroup(
        'GROUP',
        this.consumerGroup,
        this.memberId,
        'COUNT',
        countPerShard,
        'BLOCK',
        blockMs,
        'STREAMS',
        ...streams,
        ...ids,
      );
    pipelineScript(pipeline, 'firstAfter', streams, cursors);
    const [[readError, reply], [checkError, firsts]] = (await withReadDeadline(
      reader,
      pipeline.exec(),
      deadlineMs,
      blockMs === undefined ? 'the read' : 'the blocking read',
    )) as [[Error | null, unknown], [Error | null, unknown]];
    if (readError) throw readError;
    if (checkError) throw checkError;
    const entries = new Map<number, RawEntry[]>();
    const replied = (reply as [string, [string, string[]][]][] | null) ?? [];
    // The reply names each stream that had entries: a map, not a search of every stream per stream.
    const shardOf = replied.length === 0 ? undefined : new Map(streams.map((stream, i) => [stream, shards[i]]));
    for (const [stream, list] of replied) {
      const shard = shardOf!.get(String(stream))!;
      entries.set(shard, await this.withPayloadBytes(shard, toEntries(list)));
    }
    return { entries, firstAfter: new Map(shards.map((shard, i) => [shard, String((firsts as unknown[])[i] ?? '')])) };
  }

  /** The key of a shard's stream (what the read hub's doorbell watches). */
  streamKey(shardIndex: number): string {
    return this.shardKeys(shardIndex)[0];
  }

  /**
   * `readNew` for a Redis Cluster, where one command cannot span shards (each has its own slot):
   * per shard a batch of a non-blocking XREADGROUP and its `firstAfter` check, sent through the
   * process's shared read connection (ClusterReadHub: one pipeline per node for the shards of every
   * member reading then; ioredis follows MOVED/ASK of a shard sent alone). The caller paces the
   * reads (nothing blocks here). A shard whose read failed is left out of `entries` and reported in
   * `failed`; the others' entries are delivered. Rejects with ReadDeadlineError when the replies
   * did not all come back within `deadlineMs`.
   */
  async readEach(
    reader: BatchSender,
    shards: number[],
    cursors: string[],
    countPerShard: number,
    deadlineMs: number,
  ): Promise<ReadResult & { failed: Map<number, Error> }> {
    const streams = shards.map((s) => this.shardKeys(s)[0]);
    const results = await reader.exec(
      shards.map((_, i) => ({
        key: streams[i],
        build: (pipeline) => {
          pipeline.xreadgroup('GROUP', this.consumerGroup, this.memberId, 'COUNT', countPerShard, 'STREAMS', streams[i], '>');
          pipelineScript(pipeline, 'firstAfter', [streams[i]], [cursors[i]]);
        },
      })),
      deadlineMs,
    );
    const entries = new Map<number, RawEntry[]>();
    const firstAfter = new Map<number, string>();
    const failed = new Map<number, Error>();
    await Promise.all(
      results.map(async (result, i) => {
        const shard = shards[i];
        if ('error' in result) return failed.set(shard, result.error);
        const [[readError, reply], [checkError, firsts]] = result.replies as [[Error | null, unknown], [Error | null, unknown]];
        if (readError || checkError) return failed.set(shard, (readError ?? checkError)!);
        firstAfter.set(shard, String((firsts as unknown[])[0] ?? ''));
        const list = ((reply as [string, [string, string[]][]][] | null) ?? [])[0]?.[1];
        if (list === undefined) return;
        // The bytes of binary payloads: one XRANGE on the shard's own slot (its node). When it
        // fails, the entries were delivered (pending under this member) all the same: the shard
        // counts as failed this round, and the gap check finds them untracked and claims them again.
        try {
          entries.set(shard, await this.withPayloadBytes(shard, toEntries(list)));
        } catch (error) {
          firstAfter.delete(shard);
          failed.set(shard, error as Error);
        }
      }),
    );
    return { entries, firstAfter, failed };
  }

  /**
   * Moves an entry to its shard's dead-letter stream `destination` (the entry, why it failed and,
   * when given, its stack, how often it was tried, the cause and the group) and acknowledges it, atomically under the fencing
   * token; with `maxLen` > 0 the stream keeps about that many (the oldest dropped). Returns the dead
   * letter's id ('' when the entry was no longer pending, e.g. a resent call whose first run
   * landed), or null when the shard has a newer owner (then nothing was written and nothing acknowledged).
   */
  async deadLetter(
    shardIndex: number,
    grantEpoch: number,
    entry: RawEntry,
    letter: { destination: string; maxLen: number; error: string; attempts: number; cause: string; stack?: string },
  ): Promise<string | null> {
    const [stream, fence] = this.shardKeys(shardIndex);
    const deadLetters = this.keys.shardDeadLetterStream(this.streamPrefix, shardIndex, letter.destination);
    const payloadBase64 = binaryPayload(entry);
    const reply = await runScript(
      this.redis,
      'deadLetterFenced',
      [stream, fence, deadLetters],
      [
        this.consumerGroup,
        this.token(grantEpoch),
        entry.id,
        letter.maxLen,
        'shardIndex',
        String(shardIndex),
        'entryId',
        entry.id,
        'memberId',
        this.memberId,
        'consumerGroup',
        this.consumerGroup,
        'cause',
        letter.cause,
        'error',
        letter.error,
        'attempts',
        String(letter.attempts),
        'fields',
        JSON.stringify(entry.fields),
        ...(letter.stack === undefined ? [] : ['stack', letter.stack]),
        // The text in `fields` of a binary payload is not its bytes: they are kept beside it.
        ...(payloadBase64 === undefined ? [] : ['payloadBase64', payloadBase64]),
      ],
    );
    return Number(reply) === -1 ? null : String(reply);
  }
}
