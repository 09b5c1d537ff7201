import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import { compareStreamIds } from '../../protocol/stream-ids';
import type { HubReader, ReadHub } from '../../redis/read-hubs/read-hub';
import type { ReadResult, ShardClient } from '../../redis/shard-client';
import type { BufferBudget, BufferShare } from '../../redis/read-hubs/buffer-budget';
import { settlesWithin, Wakeup, withTimeout } from '../abortable-sleep';
import type { AckBatcher } from '../handle/ack-batcher';
import { ClusterPolling, type PolledTransport } from './cluster-polling';
import { commandCallTimeoutMs, type ResolvedMemberOptions } from '../member-options';
import { fewestQueued } from './read-turns';
import { ScheduleRelease } from './schedule-release';
import { backOffShard, ShardRecovery, setBackShard } from './shard-recovery';
import { KEY_STATES_PAGE, KeyOrderMirror, MIRRORED_KEY_STATES_MAX } from '../handle/key-order';
import { forShardsSideBySide } from './shards-side-by-side';
import { type PollerEvents, type ShardSet, type ShardState } from '../shard-state';

/**
 * The shortest block of a read that leaves shards out for want of buffer room (they are read in the
 * next turns): with many more shards than room, reads of idle shards go round at this pace.
 */
const LEFT_OUT_BLOCK_MS = 10;

/**
 * The longest a read waits, after the last one was sent, for room in the buffer for a fuller read
 * (see ShardReader.roomWanted): at a steady flow the room comes sooner (half the buffer handled),
 * and a shard that ran dry does not wait at all.
 */
const FULLER_READ_WAIT_MS = 50;

/** How Redis starts the error of a read of a stream whose key or consumer group is gone (it names the key, quoted). */
const LOST_KEYS_ERROR = 'NOGROUP';

/**
 * Where the reader reads: through the process's ReadHub (single Redis, Sentinel), or polled through
 * the process's ClusterReadHub on a Cluster (one XREADGROUP cannot span the shards' slots there),
 * woken by writes through the ShardWakeHub of the member's command client (`command`).
 */
export type ReadTransport = { hub: ReadHub } | PolledTransport;

/** How one read goes: blocking on the hub's connection (alone on it), non-blocking shared, or polled (Cluster). */
type ReadMode = 'solo' | 'shared' | 'polled';

/**
 * The read side of the poller: installs each granted shard's fencing token (retrying, visibly, while
 * a newer token refuses it), lets ShardRecovery take over pending entries, then reads new entries.
 * Alone on its ReadHub, a member reads all its shards in one blocking XREADGROUP on the hub's
 * blocking connection (cut short with CLIENT UNBLOCK when its shards change). Sharing the hub, it
 * reads with non-blocking XREADGROUPs on the shared read connection: a shard is read while it may
 * have unread entries (just taken, rung by the hub's doorbell, or its last read came back full), each
 * time its queue runs low; a read that comes back short hands the shard to the doorbell until a new
 * entry arrives. On a Cluster reads are polled per shard.
 */
export class ShardReader implements HubReader {
  private running = false;
  private loop: Promise<void> | undefined;
  readonly wakeup = new Wakeup();
  private currentRead: { shards: Set<number>; done: Promise<unknown>; mode: ReadMode } | undefined;
  private readonly recovery: ShardRecovery;
  /** Delayed delivery: moves the owned shards' due scheduled entries into their streams, each loop turn. */
  private readonly schedules: ScheduleRelease;
  /** Cluster: per-shard reads, their pauses and wake channels. */
  private readonly polling: ClusterPolling;
  /** Shared mode: shards read to the end by their last read; the doorbell watches them (from the id given). */
  private readonly readToEnd = new WeakMap<ShardState, string>();
  /** The last new id the doorbell rang for a shard: watched from there on, so one entry rings once. */
  private readonly lastRung = new WeakMap<ShardState, string>();
  /** Resolves the rings heard since the loop last went round (the hub waits for the reads they cause). */
  private ringsHeard: (() => void)[] = [];
  private unregister: (() => void) | undefined;
  /** This member's part of its hub's buffer budget (maxBufferedEntriesPerClient), while started. */
  private share: BufferShare | undefined;
  /** When the last read was sent (Date.now()). */
  private lastReadAt = 0;
  /**
   * The room in the buffer the loop waits for before its next read (see roomWanted), 0 while it
   * does not wait: a handler that finished wakes it only once there is that much.
   */
  private waitingForRoom = 0;
  /**
   * Reads sent so far; for each shard's grant, the number of the last read that covered it and
   * whether that read came back short (the shard read to its end): see fewestQueued.
   */
  private reads = 0;
  private readonly lastCovered = new WeakMap<ShardState, { read: number; short: boolean }>();

  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly transport: ReadTransport,
    acks: AckBatcher,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    private readonly mayStartHandlers: () => boolean,
    /** Paused: only fencing tokens are installed; no takeover, sweep or read fetches entries. */
    private readonly isPaused: () => boolean,
    private readonly dispatch: () => void,
  ) {
    this.recovery = new ShardRecovery(shards, client, acks, events, options);
    this.schedules = new ScheduleRelease(shards, client, events, options);
    this.polling = new ClusterPolling(
      shards,
      client,
      events,
      options,
      this.wakeup,
      () => this.idleWaitMs(),
      () => this.readGraceMs(),
    );
    shards.onSettled = (state) => {
      // The loop waits for room in the buffer (see roomWanted): a handler that finished made some.
      // So does a batch that finished and left a short one waiting to fill (see waitsToFill). A
      // shard that ran dry cannot wait for it (see runDry).
      if (this.waitingForRoom > 0) {
        if (this.room() >= this.waitingForRoom || this.waitsToFill(state) || this.runDry(state)) this.wakeup.notify();
      }
      // Shared mode: a handler finished, and its shard may be low enough to read again (see refillAt).
      // (Or its batch waits to fill: see waitsToFill.)
      else if (this.sharing() && !this.readToEnd.has(state) && (state.queue.length <= this.refillAt() || this.waitsToFill(state)))
        this.wakeup.notify();
    };
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.unregister = 'hub' in this.transport ? this.transport.hub.register(this) : this.transport.polled.register(this);
    // Room another member frees (its handler took entries, it released a shard) wakes a loop waiting for it.
    this.share = this.budget().join(this.options.maxBufferedEntriesPerClient, this.options.maxBufferedEntries, () => this.wakeup.notify());
    this.shards.countInto(this.share);
    this.loop = this.readLoop();
  }

  /**
   * Ends the loop and waits for it, at most `readGraceMs` beyond the block time: a call of the loop
   * (a read, a claim, a sweep) whose reply never comes must not hold up stop(). The loop then ends
   * when that call settles; what it took is pending under this member, and the shard's next owner
   * takes it over.
   */
  async stop(): Promise<void> {
    this.running = false;
    this.polling.stop();
    this.interruptRead();
    if (this.loop && !(await settlesWithin(this.loop, this.options.blockMs + this.readGraceMs()))) {
      this.events.emit(
        'error',
        new ShardError('the read loop did not end: a call on the command connection has not been answered; stopping without it'),
      );
    }
    this.unregister?.();
    this.unregister = undefined;
    // Its shards were released (their queues emptied) before the loop ended: it gives back all it held.
    this.share?.leave();
    this.heard();
  }

  /** The hub's buffer budget as this member sees it (zeros while it is not started). */
  clientBuffer(): { entries: number; peakEntries: number; cap: number; members: number; share: number } {
    return this.unregister ? this.budget().describe() : { entries: 0, peakEntries: 0, cap: 0, members: 0, share: 0 };
  }

  private budget(): BufferBudget {
    return 'hub' in this.transport ? this.transport.hub.budget : this.transport.polled.budget;
  }

  /** Whether the read under way covers the shard. */
  isReading(shardIndex: number): boolean {
    return this.currentRead?.shards.has(shardIndex) ?? false;
  }

  /** Cuts a blocking read that covers the shard short, and waits until the read under way that covers it returned. */
  async endReadOf(shardIndex: number): Promise<void> {
    const read = this.currentRead;
    if (read?.shards.has(shardIndex)) {
      this.interruptRead();
      await read.done.catch(() => undefined);
    }
  }

  /**
   * A shard ran out of work. If a blocking read under way does not cover it (it is still taking
   * over pending entries, or it was left out for want of buffer room), cut the read short so it is
   * not starved for a whole block timeout while other shards are idle.
   */
  onDrained(state: ShardState): void {
    if (state.phase === 'released') return;
    if (this.currentRead && !this.currentRead.shards.has(state.index)) this.interruptRead();
    else this.wakeup.notify();
  }

  /** Something changed (shards, holds, pause): a blocking read is cut short (CLIENT UNBLOCK), the loop looks again. */
  interruptRead(): void {
    this.wakeup.notify();
    if (this.currentRead?.mode === 'solo' && 'hub' in this.transport) this.transport.hub.unblockSolo();
  }

  /** HubReader: alone on the hub now, or no longer: a blocking read lets go of the connection. */
  modeChanged(): void {
    this.interruptRead();
  }

  /** HubReader: the shards read to the end, by stream, and the id after which an entry is new. */
  *watched(): Iterable<[string, string]> {
    if (!this.running) return;
    for (const state of this.shards.all()) {
      const after = this.readToEnd.get(state);
      if (after !== undefined && state.phase === 'reading') yield [this.client.streamKey(state.index), after];
    }
  }

  /**
   * HubReader: new entries on some streams ('' after a doorbell failure: maybe). Every shard read
   * to the end is read again, not just the rung ones: XREAD BLOCK returns at the first entry of a
   * burst, so the other shards' entries of the same burst are likely there too, and one read of
   * them all costs one round trip, where ring after ring would cost two each.
   */
  ring(rings: ReadonlyMap<string, string>): Promise<void> {
    let rung = false;
    for (const state of this.shards.all()) {
      const id = this.readToEnd.has(state) ? rings.get(this.client.streamKey(state.index)) : undefined;
      if (id === undefined) continue;
      rung = true;
      if (id !== '') this.lastRung.set(state, id);
    }
    if (!rung || !this.running) return Promise.resolve();
    for (const state of this.shards.all()) this.readToEnd.delete(state);
    this.wakeup.notify();
    return new Promise<void>((resolve) => this.ringsHeard.push(resolve));
  }

  private heard(): void {
    const heard = this.ringsHeard;
    this.ringsHeard = [];
    for (const resolve of heard) resolve();
  }

  /** The entries the next read may ask for: the hub's budget leaves this member (within maxBufferedEntries). */
  private room(): number {
    return this.shards.room(this.options.maxBufferedEntries);
  }

  /** How many entries this member may buffer now (its share of the hub's budget and the room beyond it). */
  private bufferSize(): number {
    return this.shards.bufferSize(this.options.maxBufferedEntries);
  }

  /** Whether the next read is a shared one (another member reads through the same hub). */
  private sharing(): boolean {
    return 'hub' in this.transport && !this.transport.hub.mayReadSolo(this);
  }

  /**
   * Shared mode: how low a shard's queue runs before it is read again: half of its share of the
   * buffer, so the next batch arrives before the queue is empty and each read brings several
   * entries of many shards, not one entry of one.
   */
  private refillAt(): number {
    return Math.floor(this.fillTo() / 2);
  }

  /**
   * The fewest entries per shard a read asks for. With many shards the buffer (bufferSize) is
   * what limits reads: without a floor, each handler that finished would let the loop read every
   * shard with COUNT 1, a round trip, a 64-stream XREADGROUP and its gap check for a handful of
   * entries. Half a shard's share of the buffer keeps each read worth several entries per shard.
   */
  private leastCount(): number {
    return Math.max(1, this.refillAt());
  }

  /**
   * The room a read waits for: half the buffer, or as much as the candidates can take in one read
   * if that is less (a read brings each shard at most `batchSize`, sharing at most its share). A
   * read sent whenever a handler's end made room for a few entries came back with a few entries: at
   * tens of thousands of entries a second the loop read back to back, each read a round trip, a
   * multi-stream XREADGROUP and its gap check, for a dozen entries. Waiting for half the buffer
   * leaves every shard about half its share to work on meanwhile.
   */
  private roomWanted(candidates: readonly number[], sharing: boolean): number {
    const perShard = sharing ? this.fillTo() : this.options.batchSize;
    return Math.max(this.leastCount(), Math.min(Math.ceil(this.bufferSize() / 2), candidates.length * perShard));
  }

  /**
   * Whether a read now is worth its round trip: the buffer has the room it waits for (roomWanted),
   * or a shard cannot wait for it: its queue ran dry while its stream has more (runDry), or its
   * batch waits to fill (only a read fills it).
   */
  private worthReading(candidates: readonly number[], budget: number, sharing: boolean): boolean {
    if (budget >= this.roomWanted(candidates, sharing) || this.fullerReadWaitMs() === 0) return true;
    return candidates.some((s) => {
      const state = this.shards.get(s)!;
      return this.runDry(state) || this.waitsToFill(state);
    });
  }

  /**
   * How much longer a read may wait for room for a fuller one (0: no longer). Without a bound, a
   * shard whose handler hangs with half the buffer queued behind it would keep the others unread
   * (SPEC 10.8); with it, they are read at least every FULLER_READ_WAIT_MS.
   */
  private fullerReadWaitMs(): number {
    return Math.max(0, this.lastReadAt + FULLER_READ_WAIT_MS - Date.now());
  }

  /**
   * A shard with nothing queued whose stream may hold more: its last read came back full (or it
   * was never read under this grant). A shard whose last read came back short is at its end: the
   * next read covers it, it has nothing to wait for meanwhile.
   */
  private runDry(state: ShardState): boolean {
    return state.phase === 'reading' && state.queue.length === 0 && this.lastReadOf(state)?.short !== true;
  }

  /**
   * Batch handlers: the shard's queue waits for a full batch (up to `batch.maxWaitMs`, as long as a
   * day) and nothing of the shard is in flight. No handler of its will settle to make room: only a
   * read lets the batch fill, so the read floor (leastCount) does not apply to it; the budget does.
   */
  private waitsToFill(state: ShardState): boolean {
    const batch = this.options.batch;
    return (
      batch !== undefined && batch.maxWaitMs > 0 && state.work.size === 0 && state.queue.length > 0 && state.queue.length < batch.maxSize
    );
  }

  /** The last read that covered the shard's grant; on a Cluster, a shard a write woke since counts as not read to its end. */
  private lastReadOf(state: ShardState): { read: number; short: boolean } | undefined {
    const last = this.lastCovered.get(state);
    return last?.short === true && this.polling.wasWoken(state.index) ? { read: last.read, short: false } : last;
  }

  /** A shard's share of the buffer, at most `batchSize`: no shared read brings a shard more (one busy shard must not take every other's room). */
  private fillTo(): number {
    const share = Math.floor(this.bufferSize() / Math.max(1, this.shards.order.length));
    return Math.max(1, Math.min(this.options.batchSize, share));
  }

  private async readLoop(): Promise<void> {
    while (this.running) {
      try {
        await this.claimNewShards();
        if (this.isPaused()) {
          this.heard();
          await this.wakeup.wait(this.idleWaitMs());
          continue;
        }
        const takeoverWaitsForRoom = await this.recovery.takeOverPending();
        await this.recovery.sweep();
        // Before the read: what it releases is read in this turn (the stream is where every group reads it).
        await this.schedules.releaseDue();
        this.dispatch();
        const sharing = this.sharing();
        const refillAt = this.refillAt();
        // Read ahead (alone, or polled): a shard whose queue holds less than two reads' worth is read
        // again (within maxBufferedEntries), and what the last read brought is dispatched while this
        // read is out, so handling overlaps the round trip instead of waiting for it. Sharing, a
        // shard is read at half its share of the buffer (see refillAt).
        const candidates = this.shards.order.filter((s) => {
          const state = this.shards.get(s)!;
          if (state.phase !== 'reading' || state.held.length > 0) return false;
          // Sharing, a batch waiting to fill is read before the refill point too: only a read fills it.
          return sharing
            ? !this.readToEnd.has(state) && (state.queue.length <= refillAt || this.waitsToFill(state))
            : state.queue.length < 2 * this.options.batchSize;
        });
        const budget = this.room();
        const readable = fewestQueued(
          this.shards,
          candidates,
          Math.floor(budget / this.leastCount()),
          budget,
          (state) => this.waitsToFill(state),
          (state) => this.lastReadOf(state),
        );
        const worth = readable.length > 0 && this.worthReading(candidates, budget, sharing);
        // With no room for even the fewest entries a read asks for, any room is worth waking for:
        // the loop then waits at most FULLER_READ_WAIT_MS for more.
        this.waitingForRoom =
          candidates.length === 0 || worth ? 0 : readable.length === 0 ? this.leastCount() : this.roomWanted(candidates, sharing);
        // A takeover left for want of room goes on at the first entry of room.
        if (takeoverWaitsForRoom && !worth) this.waitingForRoom = Math.max(this.waitingForRoom, 1);
        this.share?.waitForRoom(this.waitingForRoom);
        if (!worth || !this.mayStartHandlers()) {
          this.heard();
          await this.wakeup.wait(!worth && readable.length > 0 ? Math.min(this.idleWaitMs(), this.fullerReadWaitMs()) : this.idleWaitMs());
          // A ring lost on the way would delay a new entry until the next ring: blockMs bounds it.
          if (sharing && Date.now() - this.lastReadAt >= this.options.blockMs) this.rereadWatched();
          continue;
        }
        const heard = this.ringsHeard;
        this.ringsHeard = [];
        try {
          await this.readOnce(readable, budget, Math.ceil(candidates.length / readable.length));
        } finally {
          for (const resolve of heard) resolve();
        }
      } catch (error) {
        this.heard();
        if (!this.running) break;
        this.events.emit('error', new ShardError(`reading shards failed: ${(error as Error).message}`, undefined, error));
        // ioredis gives a client up for good ("end") when a (re)connect fails in certain ways (its
        // connector closed mid-way, a Sentinel lookup it may not retry): every read would fail
        // "Connection is closed." while the member keeps its shards. It is opened again here.
        if ('hub' in this.transport) this.transport.hub.repair();
        else this.transport.polled.repair();
        await this.wakeup.wait(Math.min(1000, this.options.blockMs));
      }
    }
    this.heard();
  }

  private rereadWatched(): void {
    for (const state of this.shards.all()) this.readToEnd.delete(state);
  }

  /**
   * How long past its block time a read may take before it is taken as lost (a stuck connection):
   * long enough for a slow network, short enough that the shards are read again, revocations and
   * stop() go on, well within the session timeout.
   */
  private readGraceMs(): number {
    // At least blockMs too: after a reset, ioredis resends the lost read, and the next one queues behind it.
    return Math.max(commandCallTimeoutMs(this.options), this.options.blockMs);
  }

  /** Idle (or blocked in a read) until something changes, but no longer than the next due claim retry, sweep or schedule check. */
  private idleWaitMs(): number {
    const now = Date.now();
    // Paused, no schedule is checked: the loop does not get that far.
    let wait = this.isPaused() ? this.options.blockMs : this.schedules.waitMs(now);
    for (const state of this.shards.all()) {
      if (state.phase === 'claiming') wait = Math.min(wait, state.nextClaimAt - now);
      // A takeover that failed is tried again when its backoff ends (a due one runs before this wait).
      if (state.phase === 'takeover' && state.nextClaimAt > now) wait = Math.min(wait, state.nextClaimAt - now);
      // Paused, no sweep runs: it would fetch entries.
      if (state.phase === 'reading' && !this.isPaused()) wait = Math.min(wait, state.lastSweepAt + this.options.sweepIntervalMs - now);
    }
    return Math.max(1, wait);
  }

  /** `turns`: reads it takes to cover every shard that wants one (more than 1 when the buffer's room left some out). */
  private async readOnce(readable: number[], budget: number, turns: number): Promise<void> {
    if (!this.running) return; // stopped while a call of the loop was out: the hub may be closed
    // The states the read is for: if a shard is released and granted again while the read is
    // out, its entries belong to the old grant (pending here, the new grant takes them over).
    const readFor = new Map(readable.map((s) => [s, this.shards.get(s)!]));
    const cursors = readable.map((s) => readFor.get(s)!.readCursor);
    const started = this.startRead(readable, cursors, budget, turns);
    if (!started) {
      // Between modes (the doorbell is letting go of the blocking connection): look again shortly.
      await this.wakeup.wait(Math.min(10, this.idleWaitMs()));
      return;
    }
    const { done, mode, count } = started;
    // The room the read may fill is the member's until its reply is queued (each shard brings
    // `count` at most). Polled, the round reserves for the shards it reads, when it reads them.
    const release = mode === 'polled' ? undefined : this.shards.reserve(count * readable.length);
    let polled: (() => void) | undefined;
    try {
      await this.queueReply(
        readFor,
        done.then((result) => {
          polled = result.release;
          return result;
        }),
        mode,
        count,
      );
    } finally {
      release?.();
      polled?.();
    }
  }

  /** The read `done` was sent for the shards of `readFor`: queues what it brought, and marks the shards it read to their end. */
  private async queueReply(
    readFor: Map<number, ShardState>,
    done: Promise<ReadResult & { failed?: Map<number, Error> }>,
    mode: ReadMode,
    count: number,
  ): Promise<void> {
    this.lastReadAt = Date.now();
    this.reads += 1;
    for (const state of readFor.values()) this.lastCovered.set(state, { read: this.reads, short: false });
    this.currentRead = { shards: new Set(readFor.keys()), done, mode };
    this.dispatch();
    let result: ReadResult & { failed?: Map<number, Error> };
    try {
      result = await done;
    } catch (error) {
      // One shard's lost keys fail the whole multi-stream read: that shard alone is claimed again.
      if (this.lostShard(readFor, error as Error)) return;
      throw error;
    } finally {
      this.currentRead = undefined;
    }
    // Polled (Cluster): shards whose own read failed because their keys are gone are claimed again.
    for (const [shardIndex, error] of result.failed ?? []) this.lostShard(readFor, error, shardIndex);
    let toEnd = false;
    for (const [shardIndex, state] of readFor) {
      // Entries of a shard released meanwhile stay pending: its next owner (or grant) takes them over.
      if (!this.shards.isCurrent(state)) continue;
      const entries = result.entries.get(shardIndex) ?? [];
      const covered = this.lastCovered.get(state);
      if (covered) covered.short = entries.length < count;
      if (entries.length > 0) {
        const first = result.firstAfter.get(shardIndex) ?? '';
        if (first !== '' && first !== entries[0].id) await this.recovery.recoverSkipped(state, entries[0].id);
        if (!this.shards.isCurrent(state)) continue;
        state.readCursor = entries[entries.length - 1].id;
        this.shards.enqueue(
          state,
          entries.map((entry) => ({ entry, deliveries: 1 })),
        );
      }
      if (mode !== 'shared') {
        this.readToEnd.delete(state);
      } else if (entries.length < count) {
        // Nothing more to read now: the doorbell rings when an entry after this one arrives.
        // (From the last id rung, if later: an entry another consumer took must not ring again.)
        const rung = this.lastRung.get(state);
        this.readToEnd.set(state, rung !== undefined && compareStreamIds(rung, state.readCursor) > 0 ? rung : state.readCursor);
        toEnd = true;
      }
    }
    // Handlers start now, not after the loop's next claims and sweep (a sweep that is due would put
    // them behind its round trips: the latency's tail).
    this.dispatch();
    if (toEnd && 'hub' in this.transport) this.transport.hub.changed();
  }

  /**
   * A read failed naming one shard's stream as gone (NOGROUP: its stream or its consumer group was
   * lost, by an eviction, a failover that lost the slot, an operator's DEL). One XREADGROUP reads
   * all the member's shards, so without this one lost shard would fail every read, every shard's,
   * for good (SPEC 10.8). That shard leaves the read and is claimed again (claimShard recreates the
   * group, MKSTREAM, from '0'): an 'error' and a problems line name it until the claim succeeds;
   * the entries it held before the loss are gone with its keys (SPEC 9.1: visible). The others are
   * read on at the loop's next turn. `only`: the shard the failure is known to be (a polled read).
   * Returns whether the failure was one shard's.
   */
  private lostShard(readFor: Map<number, ShardState>, error: Error, only?: number): boolean {
    if (!error.message.startsWith(LOST_KEYS_ERROR)) return false;
    const shardIndex = only ?? [...readFor.keys()].find((shard) => error.message.includes(`'${this.client.streamKey(shard)}'`));
    const state = shardIndex === undefined ? undefined : readFor.get(shardIndex);
    if (!state || !this.shards.isCurrent(state) || state.phase !== 'reading') return shardIndex !== undefined;
    state.phase = 'claiming';
    state.takeoverCursor = '0-0';
    this.readToEnd.delete(state);
    this.lastRung.delete(state);
    const delay = backOffShard(state);
    const message = `shard ${state.index}: its stream or consumer group is gone (${error.message}); not reading it until it is claimed again, which recreates them: entries it held before the loss are lost with it`;
    state.problems.set('claim', message);
    this.events.emit('error', new ShardError(`${message}; claiming it in ${delay} ms`, state.index, error));
    this.wakeup.notify();
    return true;
  }

  /**
   * Sends the read the transport and the hub's mode call for; undefined when the hub is between
   * modes (no solo read may start and no shared connection is open yet).
   */
  private startRead(
    readable: number[],
    cursors: string[],
    budget: number,
    turns: number,
  ): { done: Promise<ReadResult & { failed?: Map<number, Error>; release?: () => void }>; mode: ReadMode; count: number } | undefined {
    const perShard = Math.floor(budget / readable.length);
    // Alone or polled, a read brings each shard up to batchSize; a shared read up to its share (fillTo).
    const ownCount = Math.max(1, Math.min(this.options.batchSize, perShard));
    if (!('hub' in this.transport)) {
      const reserve = (count: number) => this.shards.reserve(count);
      return { done: this.polling.read(this.transport, readable, cursors, ownCount, reserve), mode: 'polled', count: ownCount };
    }
    const hub = this.transport.hub;
    // A blocked read must not put off a sweep (lost read replies are found only there) or a claim
    // retry that is due. Nor the shards it leaves out for want of room: they take their turn in the
    // next reads (fewestQueued), and a read of idle shards must not block them for blockMs each turn;
    // every shard is read about once per idle wait (not more often than every LEFT_OUT_BLOCK_MS).
    const idleMs = this.idleWaitMs();
    const blockMs = turns > 1 ? Math.min(idleMs, Math.max(LEFT_OUT_BLOCK_MS, Math.floor(idleMs / turns))) : idleMs;
    const solo = hub.readSolo(this, (connection) =>
      this.client.readNew(connection, readable, cursors, ownCount, blockMs, blockMs + this.readGraceMs()),
    );
    if (solo) return { done: solo, mode: 'solo', count: ownCount };
    const shared = hub.sharedConnection;
    if (!shared) return undefined;
    const count = Math.max(1, Math.min(this.fillTo(), perShard));
    return { done: this.client.readNew(shared, readable, cursors, count, undefined, this.readGraceMs()), mode: 'shared', count };
  }

  /**
   * Installs the token of each newly granted shard. A refusal (a newer token is there: the grant
   * may be stale, or the group's keys were lost while the tokens survived) keeps the shard known
   * and unread, says so each time ('error', `problems`, 'claim-refused' so the member heartbeats at
   * once), and is tried again with backoff until it succeeds or the shard is released. A claim that
   * fails (the shard's stream key holds another type, its node is down on a Cluster) is the same
   * for that shard alone: an 'error' and a `problems` line each time, tried again with backoff,
   * while the other shards are claimed and read (SPEC 10.8).
   */
  private async claimNewShards(): Promise<void> {
    const now = Date.now();
    const due = this.shards.all().filter((state) => state.phase === 'claiming' && state.nextClaimAt <= now);
    await forShardsSideBySide(due, (state) => this.claim(state));
  }

  /**
   * deferredOrder 'key', a member that may defer: the group's key states on the shard, mirrored
   * before any entry of it is handled (handle/key-order.ts), in pages up to MIRRORED_KEY_STATES_MAX.
   * Bounded as the claim (SPEC 10.1); a failed read is a failed claim (an 'error', a problems line,
   * the claim tried again with backoff: installing one's own token again is harmless). False then.
   */
  private async loadKeyOrder(state: ShardState): Promise<boolean> {
    const { deferredOrder, retryMode, ackMode, batch } = this.options;
    if (deferredOrder !== 'key' || batch || (retryMode !== 'deferred' && ackMode !== 'manual')) return true;
    try {
      const loaded = await withTimeout(
        this.client.loadKeyStates(state.index, MIRRORED_KEY_STATES_MAX, KEY_STATES_PAGE),
        commandCallTimeoutMs(this.options),
      );
      if (state.phase !== 'claiming') return false;
      state.keyOrder = new KeyOrderMirror(loaded.keyStates, loaded.complete);
      return true;
    } catch (error) {
      if (state.phase !== 'claiming') return false;
      setBackShard(
        state,
        this.events,
        'claim',
        (attempts) =>
          `shard ${state.index}: reading its key states (deferredOrder 'key') failed (${(error as Error).message}); not reading it (failed ${attempts} time(s))`,
        error,
      );
      return false;
    }
  }

  private async claim(state: ShardState): Promise<void> {
    let claim: Awaited<ReturnType<ShardClient['claimShard']>>;
    try {
      // Bounded (SPEC 10.1), as the recovery's calls: a claim past it fails like any failed claim
      // (`error`, a problems line, tried again with backoff); installing one's own token twice is harmless.
      claim = await withTimeout(this.client.claimShard(state.index, state.grantEpoch), commandCallTimeoutMs(this.options));
    } catch (error) {
      if (state.phase !== 'claiming') return;
      setBackShard(
        state,
        this.events,
        'claim',
        (attempts) => `shard ${state.index}: claiming it failed (${(error as Error).message}); not reading it (failed ${attempts} time(s))`,
        error,
      );
      return;
    }
    if (state.phase !== 'claiming') return;
    if (claim.claimed && !(await this.loadKeyOrder(state))) return;
    if (claim.claimed) {
      state.readCursor = claim.cursor;
      state.phase = 'takeover';
      state.claimAttempts = 0;
      state.problems.delete('claim');
      return;
    }
    setBackShard(
      state,
      this.events,
      'claim',
      (attempts) =>
        `shard ${state.index}: granted at epoch ${state.grantEpoch} but a newer fencing token "${claim.holder}" holds it; not reading it (refused ${attempts} time(s))`,
    );
    this.events.emit('claim-refused', { shardIndex: state.index, grantEpoch: state.grantEpoch, holder: claim.holder });
  }
}
