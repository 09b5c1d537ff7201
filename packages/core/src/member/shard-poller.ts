import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { type DecodedEntry, decodeEntry, type StreamMessage } from '../protocol/entry-format';
import { compareStreamIds, nextStreamId } from '../protocol/stream-ids';
import type { RawEntry, ReadResult, ShardClient } from '../redis/shard-client';
import { sleep, Wakeup } from './abortable-sleep';
import { type ResolvedMemberOptions, retryDelayMs } from './member-options';

type Phase = 'claiming' | 'takeover' | 'reading' | 'released';

/** Tries of one acknowledgement batch when Redis cannot be reached (about 10 s of backoff in all). */
const ACK_ATTEMPTS = 8;
type DecodedPayload = Extract<DecodedEntry, { ok: true }>;

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return value !== null && (typeof value === 'object' || typeof value === 'function') && typeof (value as PromiseLike<unknown>).then === 'function';
}

interface QueuedEntry {
  entry: RawEntry;
  /** Redis' delivery count when it was read (1 for a first read). */
  deliveries: number;
}

/** One owned shard, as the poller works on it. */
interface ShardState {
  index: number;
  /** The member epoch the shard was granted at: its fencing token. */
  grantEpoch: number;
  phase: Phase;
  queue: QueuedEntry[];
  /** Entries read at or past the shard's hold point (an ordered shrink): not handled until released. */
  held: QueuedEntry[];
  inFlight: Promise<void> | null;
  takeoverCursor: string;
  /** The last id of this shard this member has accounted for (read, or the group's position when it took the shard). */
  readCursor: string;
  lastSweepAt: number;
  /** Aborted when the shard is released: stops retries and backoffs of its entries. */
  released: AbortController;
}

/** Something went wrong on a shard; the poller goes on. `shardIndex` is set where it applies. */
export class ShardError extends Error {
  constructor(
    message: string,
    readonly shardIndex?: number,
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ShardError';
  }
}

/** A handler call exceeded `handlerTimeoutMs`; the attempt counts as failed. */
export class HandlerTimeoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HandlerTimeoutError';
  }
}

/** A batch of acknowledgements was sent: `accepted` is false when a newer owner's fencing token refused it. */
export interface AcknowledgedEvent {
  shardIndex: number;
  grantEpoch: number;
  ids: string[];
  accepted: boolean;
}

export interface PollerEvents {
  error: [ShardError];
  /** An entry went to the dead-letter stream. */
  'dead-letter': [{ shardIndex: number; id: string; reason: string; attempts: number }];
  acknowledged: [AcknowledgedEvent];
}

/**
 * The polling adapter of one member (SPEC sections 4 and 5): reads its shards, keeps at most one
 * handler in flight per shard and at most `runtimeMaxConcurrency` in all, serves shards round-robin
 * so that none starves, retries in place, dead-letters, and acknowledges under the shard's fencing
 * token. On gaining a shard it first installs its token and takes over the entries still pending
 * there, in ID order, before reading new ones.
 */
export class ShardPoller extends EventEmitter<PollerEvents> {
  private readonly shards = new Map<number, ShardState>();
  private order: number[] = [];
  private cursor = -1;
  private busy = 0;
  private buffered = 0;
  private running = false;
  private loop: Promise<void> | undefined;
  private readonly wakeup = new Wakeup();
  private currentRead: { shards: Set<number>; done: Promise<unknown> } | undefined;
  private readerId: number | undefined;
  private readonly acks = new Map<number, { grantEpoch: number; ids: string[] }>();
  private ackFlush: Promise<void> | undefined;
  /** shardIndex -> stream id from which entries wait (ordered shrink, docs/resharding.md). */
  private holds = new Map<number, string>();

  constructor(
    private readonly client: ShardClient,
    private readonly command: { client(subcommand: 'UNBLOCK', id: number): Promise<unknown> },
    private readonly reader: Redis,
    private readonly options: ResolvedMemberOptions,
    /** False while the member's lease may be lost: no handler may start then. */
    private readonly mayStartHandlers: () => boolean,
  ) {
    super();
    reader.on('ready', () => void this.refreshReaderId());
  }

  /** Handlers running now. */
  get activeHandlers(): number {
    return this.busy;
  }

  get bufferedEntries(): number {
    return this.buffered;
  }

  ownedShards(): number[] {
    return [...this.order];
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.readLoop();
  }

  /** A shard granted at `grantEpoch`: claim its token, take over its pending entries, then read it. */
  addShard(shardIndex: number, grantEpoch: number): void {
    const existing = this.shards.get(shardIndex);
    if (existing && existing.phase !== 'released') return;
    this.shards.set(shardIndex, {
      index: shardIndex,
      grantEpoch,
      phase: 'claiming',
      queue: [],
      held: [],
      inFlight: null,
      takeoverCursor: '0-0',
      readCursor: '0-0',
      lastSweepAt: Date.now(),
      released: new AbortController(),
    });
    this.order = [...this.shards.keys()].sort((a, b) => a - b);
    this.interruptRead();
  }

  /**
   * Entries of the given shards from `fromId` on are read but not handled until the holds are
   * replaced; a shard stops being read once it has held entries. An empty map releases every hold.
   */
  setHolds(holds: Map<number, string>): void {
    this.holds = holds;
    for (const state of this.shards.values()) {
      const hold = holds.get(state.index);
      if (state.held.length === 0) continue;
      const keep = hold === undefined ? [] : state.held.filter((q) => compareStreamIds(q.entry.id, hold) >= 0);
      const release = hold === undefined ? state.held : state.held.filter((q) => compareStreamIds(q.entry.id, hold) < 0);
      state.held = keep;
      state.queue.push(...release);
      this.buffered += release.length;
    }
    this.dispatch();
    this.interruptRead();
  }

  /** Shard-level conditions that stop work and need someone's attention (see CoordinatedMember.stats). */
  problems(): string[] {
    return [];
  }

  /** Entries waiting for a hold to be released. */
  get heldEntries(): number {
    let count = 0;
    for (const state of this.shards.values()) count += state.held.length;
    return count;
  }

  /**
   * Stops reading a shard and waits, at most `revocationTimeoutMs`, for its in-flight handler; then
   * acknowledges what finished. Entries read but not started stay pending for the next owner.
   */
  async releaseShard(shardIndex: number, waitForHandlerMs: number): Promise<void> {
    const state = this.shards.get(shardIndex);
    if (!state) return;
    this.release(state);
    const read = this.currentRead;
    if (read?.shards.has(shardIndex)) {
      this.interruptRead();
      await read.done.catch(() => undefined);
    }
    if (state.inFlight) {
      await Promise.race([state.inFlight, sleep(waitForHandlerMs)]);
    }
    await this.flushAcks();
  }

  /** Drops every shard at once (lease lost, fenced): nothing new starts; in-flight acks may be refused. */
  dropAll(): void {
    for (const state of this.shards.values()) this.release(state);
    this.interruptRead();
  }

  /** Stops reading, waits (bounded) for in-flight handlers, flushes acknowledgements. */
  async stop(timeoutMs: number): Promise<void> {
    this.running = false;
    const inFlight = [...this.shards.values()].map((s) => s.inFlight).filter((p): p is Promise<void> => p !== null);
    // Released first, so that no handler starts while the in-flight ones finish: an entry started
    // now would still be running when the member leaves, and its next owner would run it again.
    for (const state of [...this.shards.values()]) this.release(state);
    this.interruptRead();
    this.wakeup.notify();
    await Promise.race([Promise.all(inFlight), sleep(timeoutMs)]);
    await this.loop?.catch(() => undefined);
    await this.flushAcks();
  }

  private release(state: ShardState): void {
    if (state.phase === 'released') return;
    state.phase = 'released';
    state.released.abort();
    this.buffered -= state.queue.length;
    state.queue = [];
    state.held = [];
    this.shards.delete(state.index);
    this.order = this.order.filter((s) => s !== state.index);
  }

  // ---- reading ---------------------------------------------------------------------------------

  private async refreshReaderId(): Promise<void> {
    try {
      this.readerId = Number(await this.reader.client('ID'));
    } catch {
      this.readerId = undefined;
    }
  }

  /** Cuts a blocked read short (CLIENT UNBLOCK), so the next read sees the new set of shards. */
  private interruptRead(): void {
    this.wakeup.notify();
    if (this.currentRead && this.readerId !== undefined) {
      this.command.client('UNBLOCK', this.readerId).catch(() => undefined);
    }
  }

  private async readLoop(): Promise<void> {
    if (this.readerId === undefined) await this.refreshReaderId();
    while (this.running) {
      try {
        await this.claimNewShards();
        await this.takeOverPending();
        await this.sweepOtherConsumers();
        this.dispatch();
        const readable = this.order.filter((s) => {
          const state = this.shards.get(s)!;
          return state.phase === 'reading' && state.queue.length < this.options.batchSize && state.held.length === 0;
        });
        const budget = this.options.maxBufferedEntries - this.buffered;
        if (readable.length === 0 || budget <= 0 || !this.mayStartHandlers()) {
          await this.wakeup.wait(this.options.blockMs);
          continue;
        }
        const count = Math.max(1, Math.min(this.options.batchSize, Math.floor(budget / readable.length)));
        // The states the read is for: if a shard is released and granted again while the read is
        // out, its entries belong to the old grant (pending here, the new grant takes them over).
        const readFor = new Map(readable.map((s) => [s, this.shards.get(s)!]));
        const cursors = readable.map((s) => readFor.get(s)!.readCursor);
        const done = this.client.readNew(this.reader, readable, cursors, count, this.options.blockMs);
        this.currentRead = { shards: new Set(readable), done };
        let result: ReadResult;
        try {
          result = await done;
        } finally {
          this.currentRead = undefined;
        }
        for (const [shardIndex, entries] of result.entries) {
          // Entries of a shard released meanwhile stay pending: its next owner (or grant) takes them over.
          const state = readFor.get(shardIndex)!;
          if (entries.length === 0 || !this.isCurrent(state)) continue;
          const first = result.firstAfter.get(shardIndex) ?? '';
          if (first !== '' && first !== entries[0].id) await this.recoverSkipped(state, entries[0].id);
          if (!this.isCurrent(state)) continue;
          state.readCursor = entries[entries.length - 1].id;
          this.enqueue(state, entries.map((entry) => ({ entry, deliveries: 1 })));
        }
        this.dispatch();
      } catch (error) {
        if (!this.running) break;
        this.emit('error', new ShardError(`reading shards failed: ${(error as Error).message}`, undefined, error));
        await this.wakeup.wait(Math.min(1000, this.options.blockMs));
      }
    }
  }

  /** Whether `state` is still this member's grant of its shard (not released, not replaced by a new grant). */
  private isCurrent(state: ShardState): boolean {
    return state.phase !== 'released' && this.shards.get(state.index) === state;
  }

  /** Queues entries for the grant they were read or claimed under; dropped if that grant has ended. */
  private enqueue(state: ShardState, entries: QueuedEntry[]): void {
    if (!this.isCurrent(state) || entries.length === 0) return;
    const hold = this.holds.get(state.index);
    if (hold !== undefined) {
      // Entries come in id order: everything from the first one at the hold point on waits.
      const first = entries.findIndex((q) => compareStreamIds(q.entry.id, hold) >= 0);
      if (first >= 0 || state.held.length > 0) {
        const cut = state.held.length > 0 ? 0 : first;
        state.held.push(...entries.slice(cut));
        entries = entries.slice(0, cut);
      }
    }
    state.queue.push(...entries);
    this.buffered += entries.length;
  }

  private async claimNewShards(): Promise<void> {
    for (const state of [...this.shards.values()]) {
      if (state.phase !== 'claiming') continue;
      const claimed = await this.client.claimShard(state.index, state.grantEpoch);
      if (state.phase !== 'claiming') continue;
      if (claimed !== null) {
        state.readCursor = claimed;
        state.phase = 'takeover';
      } else {
        this.release(state);
        this.emit('error', new ShardError(`shard ${state.index}: a newer owner holds its fencing token; not reading it`, state.index));
      }
    }
  }

  /** Pending entries of a newly gained shard come first, in ID order, page by page as room allows. */
  private async takeOverPending(): Promise<void> {
    for (const state of [...this.shards.values()]) {
      while (state.phase === 'takeover' && state.queue.length < this.options.batchSize) {
        const page = await this.client.claimPending(state.index, state.grantEpoch, 'all', state.takeoverCursor, this.options.batchSize);
        if (page.fenced) {
          this.release(state);
          this.emit('error', new ShardError(`shard ${state.index}: lost while taking over its pending entries`, state.index));
          break;
        }
        this.enqueue(state, await this.withDeliveryCounts(state.index, page.entries));
        state.takeoverCursor = page.cursor;
        if (page.cursor === '0-0') state.phase = 'reading';
      }
    }
  }

  /**
   * A read returned entries of a shard, but not the first entry after what this member had accounted
   * for (`readNew`'s check): the ones in between were delivered to another consumer after this
   * member took the shard (a zombie's read that reached Redis late, e.g. after a partition healed),
   * or to this member in a reply that never arrived. They are taken over now, in ID order, and queued
   * before the batch, so the shard's order holds.
   */
  private async recoverSkipped(state: ShardState, before: string): Promise<void> {
    let start = nextStreamId(state.readCursor);
    let recovered = 0;
    for (;;) {
      const page = await this.client.claimPending(state.index, state.grantEpoch, 'all', start, this.options.batchSize);
      if (page.fenced) {
        this.release(state);
        this.emit('error', new ShardError(`shard ${state.index}: lost (fencing token changed)`, state.index));
        return;
      }
      const skipped = page.entries.filter((e) => compareStreamIds(e.id, before) < 0);
      this.enqueue(state, await this.withDeliveryCounts(state.index, skipped));
      this.advanceCursor(state, skipped);
      recovered += skipped.length;
      if (skipped.length < page.entries.length || page.cursor === '0-0') break;
      start = page.cursor;
    }
    this.emit('error', new ShardError(`shard ${state.index}: ${recovered} entries before ${before} were delivered elsewhere (a late read); took them over first`, state.index));
  }

  /**
   * Entries that Redis handed to another consumer of the group after this member took the shard (a
   * zombie's blocked read) would otherwise wait forever in that consumer's pending list.
   */
  private async sweepOtherConsumers(): Promise<void> {
    const now = Date.now();
    for (const state of [...this.shards.values()]) {
      if (state.phase !== 'reading' || now - state.lastSweepAt < this.options.sweepIntervalMs) continue;
      state.lastSweepAt = now;
      const page = await this.client.claimPending(state.index, state.grantEpoch, 'others', '0-0', this.options.batchSize);
      if (page.fenced) {
        this.release(state);
        this.emit('error', new ShardError(`shard ${state.index}: lost (fencing token changed)`, state.index));
      } else {
        this.enqueue(state, await this.withDeliveryCounts(state.index, page.entries));
        this.advanceCursor(state, page.entries);
      }
    }
  }

  /**
   * Entries taken over from other consumers are accounted for: a later check must not take them
   * again (they may be queued or in flight here, pending under this member's name).
   */
  private advanceCursor(state: ShardState, entries: RawEntry[]): void {
    const last = entries[entries.length - 1]?.id;
    if (last !== undefined && compareStreamIds(last, state.readCursor) > 0) state.readCursor = last;
  }

  private async withDeliveryCounts(shardIndex: number, entries: RawEntry[]): Promise<QueuedEntry[]> {
    if (entries.length === 0) return [];
    const counts = await this.client.deliveryCounts(shardIndex, entries[0].id, entries[entries.length - 1].id, entries.length);
    return entries.map((entry) => ({ entry, deliveries: counts.get(entry.id) ?? 1 }));
  }

  // ---- dispatching -----------------------------------------------------------------------------

  /** Round-robin from the shard after the last one served: every owned shard keeps making progress. */
  private nextShard(): ShardState | undefined {
    const n = this.order.length;
    for (let step = 1; step <= n; step++) {
      const position = (this.cursor + step) % n;
      const state = this.shards.get(this.order[position]);
      if (state && state.queue.length > 0 && state.inFlight === null && state.phase !== 'released') {
        this.cursor = position;
        return state;
      }
    }
    return undefined;
  }

  private dispatch(): void {
    while (this.busy < this.options.runtimeMaxConcurrency && this.mayStartHandlers()) {
      const state = this.nextShard();
      if (!state) return;
      const queued = state.queue.shift()!;
      this.buffered -= 1;
      const pending = this.process(state, queued);
      if (pending === undefined) {
        // A synchronous handler finished: no promise, no microtask, on to the next entry.
        if (state.queue.length === 0) this.onDrained(state);
        continue;
      }
      this.busy += 1;
      state.inFlight = pending.finally(() => {
        this.busy -= 1;
        state.inFlight = null;
        if (state.queue.length === 0) this.onDrained(state);
        this.dispatch();
      });
    }
  }

  /**
   * A shard ran out of work. If the current blocking read does not cover it (it is still taking
   * over pending entries, or it was left out for want of buffer room), cut the read short so it is
   * not starved for a whole block timeout while other shards are idle.
   */
  private onDrained(state: ShardState): void {
    if (state.phase === 'released') return;
    if (this.currentRead && !this.currentRead.shards.has(state.index)) this.interruptRead();
    else this.wakeup.notify();
  }

  /** Handles one entry; returns undefined when it completed synchronously, else a promise. */
  private process(state: ShardState, queued: QueuedEntry): Promise<void> | undefined {
    const decoded = decodeEntry(queued.entry.fields, this.options.codec);
    if (!decoded.ok) return this.deadLetter(state, queued.entry, decoded.reason, 0);
    return this.attempt(state, queued, decoded, 1);
  }

  private attempt(state: ShardState, queued: QueuedEntry, decoded: DecodedPayload, attempt: number): Promise<void> | undefined {
    if (state.released.signal.aborted || !this.mayStartHandlers()) return undefined; // stays pending for the next owner
    const { entry } = queued;
    const message: StreamMessage = {
      id: entry.id,
      streamPrefix: this.options.streamPrefix,
      shardIndex: state.index,
      key: decoded.key,
      payload: decoded.payload,
      headers: decoded.headers,
      deliveryCount: queued.deliveries + attempt - 1,
    };
    let result: unknown;
    try {
      result = this.options.handler(message);
    } catch (error) {
      return this.failed(state, queued, decoded, attempt, error);
    }
    if (isThenable(result)) {
      return this.withHandlerTimeout(Promise.resolve(result), state, entry.id).then(
        () => this.queueAck(state, entry.id),
        (error: unknown) => this.failed(state, queued, decoded, attempt, error),
      );
    }
    this.queueAck(state, entry.id);
    return undefined;
  }

  /** A handler that does not settle in `handlerTimeoutMs` fails the attempt; the shard moves on. */
  private withHandlerTimeout(call: Promise<unknown>, state: ShardState, id: string): Promise<unknown> {
    const limit = this.options.handlerTimeoutMs;
    if (limit === 0) return call;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.emit('error', new ShardError(`shard ${state.index}: the handler of ${id} did not settle within handlerTimeoutMs (${limit} ms)`, state.index));
        reject(new HandlerTimeoutError(`handler did not settle within ${limit} ms`));
      }, limit);
    });
    return Promise.race([call, timeout]).finally(() => clearTimeout(timer));
  }

  /** Retry in place (order is kept) with backoff, then dead-letter. */
  private async failed(state: ShardState, queued: QueuedEntry, decoded: DecodedPayload, attempt: number, error: unknown): Promise<void> {
    if (attempt < this.options.maxAttempts) {
      const delay = retryDelayMs(attempt, this.options.retryBackoffMs, this.options.retryBackoffMaxMs);
      if (!(await sleep(delay, state.released.signal))) return;
      return this.attempt(state, queued, decoded, attempt + 1);
    }
    const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return this.deadLetter(state, queued.entry, reason, attempt);
  }

  private async deadLetter(state: ShardState, entry: RawEntry, reason: string, attempts: number): Promise<void> {
    try {
      await this.client.deadLetter(state.index, entry, reason, attempts);
      this.emit('dead-letter', { shardIndex: state.index, id: entry.id, reason, attempts });
      this.queueAck(state, entry.id);
    } catch (error) {
      // Not acknowledged: the entry stays pending and is retried by whoever owns the shard next.
      this.emit('error', new ShardError(`shard ${state.index}: writing dead letter ${entry.id} failed`, state.index, error));
    }
  }

  // ---- acknowledging -------------------------------------------------------------------------------

  /** Acks are batched per shard and sent together (pipelined) once the current burst of work settles. */
  private queueAck(state: ShardState, id: string): void {
    let batch = this.acks.get(state.index);
    if (!batch || batch.grantEpoch !== state.grantEpoch) {
      if (batch) void this.flushAcks();
      batch = { grantEpoch: state.grantEpoch, ids: [] };
      this.acks.set(state.index, batch);
    }
    batch.ids.push(id);
    if (!this.ackFlush) this.ackFlush = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.flushAcks());
  }

  async flushAcks(): Promise<void> {
    this.ackFlush = undefined;
    const batches = [...this.acks];
    this.acks.clear();
    await Promise.all(batches.map(([shardIndex, { grantEpoch, ids }]) => this.sendAcks(shardIndex, grantEpoch, ids)));
  }

  /**
   * One fenced acknowledgement batch. A failure to reach Redis is retried with backoff while the
   * poller runs (a restart or a reset must not leave finished entries pending here for good); after
   * the last attempt they stay pending and the shard's next owner processes them again.
   */
  private async sendAcks(shardIndex: number, grantEpoch: number, ids: string[], attempt = 1): Promise<void> {
    try {
      const acked = await this.client.ack(shardIndex, grantEpoch, ids);
      this.emit('acknowledged', { shardIndex, grantEpoch, ids, accepted: acked !== -1 });
      if (acked === -1) {
        this.emit('error', new ShardError(`shard ${shardIndex}: ${ids.length} acknowledgement(s) refused, the shard has a new owner; it will process them again`, shardIndex));
      }
    } catch (error) {
      const retry = this.running && attempt < ACK_ATTEMPTS;
      this.emit('error', new ShardError(`shard ${shardIndex}: acknowledging ${ids.length} entries failed${retry ? ', retrying' : '; they stay pending'}`, shardIndex, error));
      if (!retry) return;
      await sleep(retryDelayMs(attempt, 50, 2000));
      return this.sendAcks(shardIndex, grantEpoch, ids, attempt + 1);
    }
  }
}
