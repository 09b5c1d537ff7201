import { setMaxListeners } from 'node:events';
import { compareStreamIds } from '../protocol/stream-ids';
import type { RawEntry } from '../redis/shard-client';
import type { BufferShare } from '../redis/read-hubs/buffer-budget';
import type { CallSignal } from './handle/call-signal';
import { type AckRefusedEvent, HandlerAbortedError, type HandlerAbortReason, type ShardError } from './consumption-errors';
import type { DeadLetterEvent } from './handle/dead-letter-options';
import type { KeyOrderMirror } from './handle/key-order';
import type { ResizeStep } from './read/schedule-givers';

/**
 * Where a granted shard is: installing its fencing token (and retrying while a newer token refuses
 * it), taking over its pending entries, reading new ones; or given up.
 */
export type Phase = 'claiming' | 'takeover' | 'reading' | 'released';

export interface QueuedEntry {
  entry: RawEntry;
  /** Its lane key (lanes > 1), worked out when first needed. */
  lane?: string;
  /** Redis' delivery count when it was read (1 for a first read). */
  deliveries: number;
}

/** One owned shard, as the poller works on it. */
export interface ShardState {
  index: number;
  /** The member epoch the shard was granted at: its fencing token. */
  grantEpoch: number;
  phase: Phase;
  queue: QueuedEntry[];
  /** Entries read at or past the shard's hold point (an ordered shrink): not handled until released. */
  held: QueuedEntry[];
  /**
   * The work in flight (handler, retry backoff, dead-letter write), by lane key: one at most per
   * key, `lanes` at most in all (one, of every key, without lanes).
   */
  work: Map<string, Work>;
  /**
   * Work of this shard whose wait is over (a retry's backoff, a pause, an unsafe lease) and that
   * asks for a worker for its next handler call, in the order it asked: served before the queue.
   */
  resuming: Work[];
  takeoverCursor: string;
  /** The last id of this shard this member has accounted for (read, or the group's position when it took the shard). */
  readCursor: string;
  lastSweepAt: number;
  /** When its schedule is checked for due delayed entries next (ms since the epoch; read/schedule-release.ts). */
  nextScheduleCheckAt: number;
  /**
   * Since when its due delayed entries wait for a shard that gave it keys in a resize (ScheduleGivers;
   * undefined while none wait): past HELD_VISIBLE_AFTER_BLOCKS idle waits it is a problems line.
   */
  scheduleHeldSince?: number;
  /**
   * True while the shard's sweeps collect entries (other consumers', then this member's untracked
   * ones): no handler starts on the shard meanwhile, since either part may find entries older than
   * what the other part queued (SPEC 5 order).
   */
  sweeping: boolean;
  /** Failed or refused tries in a row of the shard's claim (then of its takeover), and when the next is due (ms since the epoch). */
  claimAttempts: number;
  nextClaimAt: number;
  /** What stops work on this shard now, by kind ('claim', 'takeover', 'dead-letter …', 'stalled …'); shown in `stats().problems`. */
  problems: Map<string, string>;
  /** Batch handlers: since when the queue has waited for a full batch (ms since the epoch). */
  batchWaitFrom: number | undefined;
  /** Aborted when the shard is released: stops retries and backoffs of its entries. */
  released: AbortController;
  /** deferredOrder 'key': the group's key states on the shard, loaded at its claim (handle/key-order.ts). */
  keyOrder: KeyOrderMirror | undefined;
}

/** Entries in flight on one lane of a shard: one entry, or one batch. */
export interface Work {
  /** The entries it is on, in ID order. */
  ids: string[];
  /** Settles when the work is over (acknowledged, dead-lettered, or given up with the shard). */
  done: Promise<void>;
  /** The handler call running now (not a retry's backoff): `message.signal` is its signal. */
  call: CallSignal | undefined;
  /**
   * Whether it holds one of the member's `runtimeMaxConcurrency` workers now: while a handler call
   * runs (or an entry's check, or a manual attempt waits for its ack), not while it waits out a
   * backoff or writes a dead letter, nor once it stalled (past `handlerStallMs`).
   */
  worker: boolean;
  /** Its call has run past `handlerStallMs`: reported, its worker given back, until the call ends. */
  stalled: boolean;
  /** When it took its worker (ms since the epoch), while the stall watch follows it. */
  since: number;
  /** Set while it waits in its shard's `resuming`: called when it gets a worker (true) or the shard is released (false). */
  resume: ((granted: boolean) => void) | undefined;
}

/** Settles when every piece of the shard's work in flight now is over; null when there is none. */
export function workInFlight(state: ShardState): Promise<unknown> | null {
  if (state.work.size === 0) return null;
  return Promise.all([...state.work.values()].map((w) => w.done));
}

/** Whether the entry is in flight on the shard. */
export function isInFlight(state: ShardState, id: string): boolean {
  for (const work of state.work.values()) if (work.ids.includes(id)) return true;
  return false;
}

/** Every entry in flight on the shard. */
export function inFlightIds(state: ShardState): string[] {
  return [...state.work.values()].flatMap((w) => w.ids);
}

/** Fires `message.signal` of every handler call running on the shard's grant (each lane's). */
export function abortCalls(state: ShardState, reason: HandlerAbortReason, message: string): void {
  for (const work of state.work.values()) work.call?.abort(new HandlerAbortedError(reason, message));
}

/** A batch of acknowledgements was sent: `accepted` is false when a newer owner's fencing token refused it. */
export interface AcknowledgedEvent {
  shardIndex: number;
  grantEpoch: number;
  ids: string[];
  accepted: boolean;
}

/** A granted shard whose fencing token could not be installed: `holder`'s token is newer. */
export interface ClaimRefusedEvent {
  shardIndex: number;
  grantEpoch: number;
  holder: string;
}

/** A deferred retry written (docs/runtime.md, Deferred retries): the attempts it has used, and when it is due (epoch ms, Redis' clock). */
export interface DeferredEvent {
  shardIndex: number;
  id: string;
  attempts: number;
  dueAt: number;
  reason: string;
}

/** Due entries of a shard moved from its schedules into its stream by this member's turn (docs/runtime.md, Delayed delivery): delayed entries and the group's deferred retries together. */
export interface ReleasedEvent {
  shardIndex: number;
  count: number;
}

/**
 * An entry parked behind its key's deferred ones (deferredOrder 'key'; docs/runtime.md, Deferred
 * retries): acknowledged and put in the group's schedule, due with them; the attempts it has used.
 */
export interface ParkedEvent {
  shardIndex: number;
  id: string;
  /** Its routing key (undefined without one): its copy comes back among the key's, in their order. */
  key: string | undefined;
  attempts: number;
  dueAt: number;
}

export interface PollerEvents {
  error: [ShardError];
  /** An entry went to the dead-letter stream. */
  'dead-letter': [DeadLetterEvent];
  /** A failed entry was acknowledged and put in the group's deferred schedule (retryMode 'deferred', `nack({ defer: true })`). */
  deferred: [DeferredEvent];
  /** Due entries of a shard released into its stream (one event per release call that moved some). */
  released: [ReleasedEvent];
  /** An entry was acknowledged and parked behind its key's deferred entries (deferredOrder 'key'). */
  parked: [ParkedEvent];
  acknowledged: [AcknowledgedEvent];
  /**
   * A granted shard's claim was refused (a newer token is installed); the poller retries with
   * backoff, and the member should heartbeat at once: its grant may be stale.
   */
  'claim-refused': [ClaimRefusedEvent];
  /**
   * A fenced call (an ack, a takeover, a dead letter) was refused by a newer owner's token, and the
   * shard was given up locally. The member should heartbeat at once: the coordinator either takes
   * the shard away, or still grants it (then it is claimed again, visibly refused while the newer
   * token holds it), so it is never left owned but unread.
   */
  'shard-lost': [{ shardIndex: number; grantEpoch: number }];
  /** ackMode 'manual': a `message.ack()`/`nack()` that could not count. */
  'ack-refused': [AckRefusedEvent];
}

/**
 * The shards the poller works on, in index order, with the entries they buffer and the holds of an
 * ordered shrink. Shared by the reader (which fills queues) and the dispatcher (which drains them).
 */
export class ShardSet {
  private readonly states = new Map<number, ShardState>();

  /** `onLost`: a shard was given up because a fenced call was refused (see `lose`). */
  constructor(private readonly onLost: (state: ShardState) => void = () => undefined) {}

  /**
   * The shards in index order, sorted again only when read after a change: a grant or a release of
   * every shard of a stream at once (up to MAX_SHARD_COUNT) must not sort the set once per shard.
   */
  get order(): number[] {
    this.sorted ??= [...this.states.keys()].sort((a, b) => a - b);
    return this.sorted;
  }
  private sorted: number[] | undefined = [];
  /**
   * Entries queued (not held) over all shards: what counts against `maxBufferedEntries`, and against
   * the hub's budget (`maxBufferedEntriesPerClient`) through `share`. Changed only by `count`, so
   * that every way an entry leaves a queue (a handler takes it, its shard is released: revoked,
   * lost, stopped, dropped; a hold moves it) gives its room back.
   */
  get buffered(): number {
    return this.queuedEntries;
  }
  private queuedEntries = 0;
  private share: BufferShare | undefined;
  /** shardIndex -> stream id from which entries wait (ordered shrink, docs/resharding.md). */
  holds = new Map<number, string>();
  /** The stream's resize history as the last metadata sync read it (ScheduleGivers). */
  resizeHistory: { history: readonly ResizeStep[]; shardCount: number; metadataVersion: number } = {
    history: [],
    shardCount: 0,
    metadataVersion: 0,
  };
  /**
   * shardIndex -> a released grant whose handler is still running (a handler cannot be stopped: the
   * lease was lost, or a revocation's wait ran out). A new grant of the shard starts no handler
   * until it settled, or the entry it runs (pending under this member's name, so the new grant's
   * takeover queues it again) would run twice at once, in one process (SPEC 5).
   */
  readonly lingering = new Map<number, ShardState>();
  /** Called when a shard's in-flight work ended (a sharing reader reads a shard again once its queue runs low). */
  onSettled: ((state: ShardState) => void) | undefined;

  /** Counts the queued entries into `share` from now on (the reader joined its hub's budget), those queued now included. */
  countInto(share: BufferShare): void {
    this.share = share;
    share.count(this.queuedEntries - share.queued);
  }

  /** `count` entries joined the queues (> 0) or left them (< 0). */
  count(count: number): void {
    this.queuedEntries += count;
    this.share?.count(count);
  }

  /**
   * The entries a read (or a takeover page) may ask for now: the room the hub's budget leaves this
   * member, within its own `maxBufferedEntries` (`ownMax`; all there is before the reader joined).
   */
  room(ownMax: number): number {
    return this.share ? this.share.room() : Math.max(0, ownMax - this.queuedEntries);
  }

  /** The most this member may buffer now: what it holds or has asked for, and its room. */
  bufferSize(ownMax: number): number {
    return this.share ? this.share.size() : ownMax;
  }

  /**
   * Holds `count` entries of room while a read that may bring them is out, so no other member's
   * read takes it; returns the release (idempotent), called once the reply is queued or lost.
   */
  reserve(count: number): () => void {
    // No share: the reader has not started, and nothing reads.
    return this.share?.reserve(count) ?? (() => undefined);
  }

  get(shardIndex: number): ShardState | undefined {
    return this.states.get(shardIndex);
  }

  all(): ShardState[] {
    return [...this.states.values()];
  }

  add(shardIndex: number, grantEpoch: number): ShardState {
    const state: ShardState = {
      index: shardIndex,
      grantEpoch,
      phase: 'claiming',
      queue: [],
      held: [],
      work: new Map(),
      resuming: [],
      takeoverCursor: '0-0',
      readCursor: '0-0',
      lastSweepAt: Date.now(),
      nextScheduleCheckAt: 0,
      sweeping: false,
      claimAttempts: 0,
      nextClaimAt: 0,
      problems: new Map(),
      batchWaitFrom: undefined,
      released: releaseSignal(),
      keyOrder: undefined,
    };
    this.states.set(shardIndex, state);
    this.sorted = undefined;
    return state;
  }

  /** Whether `state` is still this member's grant of its shard (not released, not replaced by a new grant). */
  isCurrent(state: ShardState): boolean {
    return state.phase !== 'released' && this.states.get(state.index) === state;
  }

  /** Gives a shard up locally: its queued entries stay pending in Redis for whoever owns it next. */
  release(state: ShardState): void {
    if (state.phase === 'released') return;
    state.phase = 'released';
    state.released.abort();
    this.count(-state.queue.length);
    state.queue = [];
    state.held = [];
    state.problems.clear();
    if (state.work.size > 0) this.lingering.set(state.index, state);
    if (this.states.get(state.index) === state) {
      this.states.delete(state.index);
      this.sorted = undefined;
    }
  }

  /**
   * Queues entries for the grant they were read or claimed under (dropped if that grant has ended),
   * in ID order: recovered entries older than queued ones go before them. Entries at or past the
   * shard's hold point wait in `held`.
   */
  enqueue(state: ShardState, entries: QueuedEntry[]): void {
    if (!this.isCurrent(state) || entries.length === 0) return;
    const hold = this.holds.get(state.index);
    const waiting = hold === undefined ? [] : entries.filter((q) => compareStreamIds(q.entry.id, hold) >= 0);
    const ready = hold === undefined ? entries : entries.filter((q) => compareStreamIds(q.entry.id, hold) < 0);
    state.queue = inIdOrder(state.queue, ready);
    state.held = inIdOrder(state.held, waiting);
    this.count(ready.length);
  }

  /**
   * Replaces the holds: entries below a shard's new hold point (or of a shard with none) are queued,
   * and queued entries at or past it (read before the member heard of the hold) wait in `held`.
   */
  setHolds(holds: Map<number, string>): void {
    this.holds = holds;
    for (const state of this.states.values()) {
      if (state.held.length === 0 && state.queue.length === 0) continue;
      const entries = inIdOrder(state.queue, state.held);
      this.count(-state.queue.length);
      state.queue = [];
      state.held = [];
      this.enqueue(state, entries);
    }
  }

  /** In-flight work of `state` ended: if it was a released grant's last, a new grant may start handlers. */
  settled(state: ShardState): void {
    if (state.work.size === 0 && this.lingering.get(state.index) === state) this.lingering.delete(state.index);
    this.onSettled?.(state);
  }

  /**
   * Gives a shard up because a fenced call was refused (a newer owner's token is there): released as
   * above, and the calls still running on it are told (`message.signal`, reason `shard-lost`), as
   * when the lease is lost: the next owner runs their entries too.
   */
  lose(state: ShardState, why: string): void {
    if (state.phase === 'released') return;
    this.release(state);
    abortCalls(state, 'shard-lost', why);
    this.onLost(state);
  }

  /** Entry ids this member tracks on a shard: queued or held (in flight is the dispatcher's, acks the batcher's). */
  buffers(state: ShardState): string[] {
    return [...state.queue, ...state.held].map((q) => q.entry.id);
  }
}

/** `existing` and `added` (each in ID order) as one list in ID order; appending is the common case. */
function inIdOrder(existing: QueuedEntry[], added: QueuedEntry[]): QueuedEntry[] {
  if (added.length === 0) return existing;
  const last = existing[existing.length - 1];
  if (!last || compareStreamIds(last.entry.id, added[0].entry.id) < 0) return existing.concat(added);
  return existing.concat(added).sort((a, b) => compareStreamIds(a.entry.id, b.entry.id));
}

/**
 * A grant's "released" signal. Every lane's retry backoff, lease wait and dead-letter retry listens
 * on it while it waits and removes its listener when the wait ends, so a shard with many lanes has
 * many listeners at once by design: Node's leak warning (more than 10) would fire for 11 lanes
 * retrying together, in the application's logs, about nothing.
 */
function releaseSignal(): AbortController {
  const controller = new AbortController();
  setMaxListeners(0, controller.signal);
  return controller;
}
