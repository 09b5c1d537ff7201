import type { EventEmitter } from 'node:events';
import type { Cluster, Redis } from 'ioredis';
import { compareStreamIds, nextStreamId } from '../protocol/stream-ids';
import type { ClaimResult, RawEntry, ReadResult, ShardClient } from '../redis/shard-client';
import { ShardWakeHub } from '../redis/shard-wake-hub';
import { isCluster } from '../redis/slot-pipelines';

type ClaimedPage = Extract<ClaimResult, { fenced: false }>;
import { settlesWithin, Wakeup } from './abortable-sleep';
import { reconnect } from './reader-connection';
import type { AckBatcher } from './ack-batcher';
import { type ResolvedMemberOptions, retryDelayMs } from './member-options';
import { inFlightIds, isInFlight, type PollerEvents, type QueuedEntry, ShardError, type ShardSet, type ShardState } from './shard-state';

/** Backoff of a refused shard claim: from this, doubling, up to the max. */
const CLAIM_RETRY_MS = 100;
const CLAIM_RETRY_MAX_MS = 5000;
/**
 * On a Redis Cluster reads do not block (one XREADGROUP cannot span shards' slots): after a read
 * that found nothing, the next waits this long, doubling up to the max, and at once after one that
 * found entries or when anything wakes the reader (a shard drained, granted, released).
 */
const CLUSTER_POLL_MIN_MS = 2;
const CLUSTER_POLL_MAX_MS = 50;
/**
 * The longest pause once every shard being read is subscribed to its wake channel (a producer's
 * write wakes the reader at once, ShardWakeHub): what a lost wake-up, or an entry written by
 * something other than a StreamProducer, may wait.
 */
const CLUSTER_WOKEN_POLL_MAX_MS = 500;

/**
 * The read side of the poller: installs each granted shard's fencing token (retrying, visibly, while
 * a newer token refuses it), takes over its pending entries in ID order, then reads new entries of
 * all shards in one blocking XREADGROUP. It repairs what reads can miss: entries another consumer
 * read late (the gap check on each batch, and a periodic sweep of other consumers' pending
 * entries), and entries of this member whose read reply was lost (a periodic sweep of its own
 * pending entries that it does not track).
 */
export class ShardReader {
  private running = false;
  private loop: Promise<void> | undefined;
  readonly wakeup = new Wakeup();
  private currentRead: { shards: Set<number>; done: Promise<unknown> } | undefined;
  private readerId: number | undefined;
  /** A Cluster reader: reads are polled (readEach), not blocking; nothing to unblock. */
  private readonly polled: boolean;
  /** Cluster: a shard's grant -> its pause after its last read, and when it is due again (a new grant is due at once). */
  private readonly polls = new WeakMap<ShardState, { delayMs: number; nextAt: number }>();
  /** Cluster: shards whose wake channel a write rang since their last read. */
  private readonly woken = new Set<number>();
  /** Cluster: shardIndex -> its wake channel's subscription (`confirmed` once Redis answered it). */
  private readonly wakes = new Map<number, { stop: () => void; confirmed: boolean }>();

  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly command: { client(subcommand: 'UNBLOCK', id: number): Promise<unknown> },
    private readonly reader: Redis,
    private readonly acks: AckBatcher,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    private readonly mayStartHandlers: () => boolean,
    /** Paused: only fencing tokens are installed; no takeover, sweep or read fetches entries. */
    private readonly isPaused: () => boolean,
    private readonly dispatch: () => void,
  ) {
    this.polled = isCluster(reader);
    if (!this.polled) reader.on('ready', () => void this.refreshReaderId());
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.loop = this.readLoop();
  }

  /**
   * Ends the loop and waits for it, at most `readGraceMs` beyond the block time: a call of the loop
   * on the command connection (a claim, a sweep) whose reply never comes must not hold up stop().
   * The loop then ends when that call settles; what it took is pending under this member, and the
   * shard's next owner takes it over.
   */
  async stop(): Promise<void> {
    this.running = false;
    for (const wake of this.wakes.values()) wake.stop();
    this.wakes.clear();
    this.interruptRead();
    if (this.loop && !(await settlesWithin(this.loop, this.options.blockMs + this.readGraceMs()))) {
      this.events.emit('error', new ShardError('the read loop did not end: a call on the command connection has not been answered; stopping without it'));
    }
  }

  /** Whether the blocking read under way covers the shard. */
  isReading(shardIndex: number): boolean {
    return this.currentRead?.shards.has(shardIndex) ?? false;
  }

  /** Interrupts a read that covers the shard and waits until it returned. */
  async endReadOf(shardIndex: number): Promise<void> {
    const read = this.currentRead;
    if (read?.shards.has(shardIndex)) {
      this.interruptRead();
      await read.done.catch(() => undefined);
    }
  }

  /**
   * A shard ran out of work. If the current blocking read does not cover it (it is still taking
   * over pending entries, or it was left out for want of buffer room), cut the read short so it is
   * not starved for a whole block timeout while other shards are idle.
   */
  onDrained(state: ShardState): void {
    if (state.phase === 'released') return;
    if (this.currentRead && !this.currentRead.shards.has(state.index)) this.interruptRead();
    else this.wakeup.notify();
  }

  /** Cuts a blocked read short (CLIENT UNBLOCK), so the next read sees the new set of shards. */
  interruptRead(): void {
    this.wakeup.notify();
    if (this.currentRead && this.readerId !== undefined && !this.polled) {
      this.command.client('UNBLOCK', this.readerId).catch(() => undefined);
    }
  }

  private async refreshReaderId(): Promise<void> {
    try {
      this.readerId = Number(await this.reader.client('ID'));
    } catch {
      this.readerId = undefined;
    }
  }

  private async readLoop(): Promise<void> {
    if (this.readerId === undefined && !this.polled) await this.refreshReaderId();
    while (this.running) {
      try {
        await this.claimNewShards();
        if (this.isPaused()) {
          await this.wakeup.wait(this.idleWaitMs());
          continue;
        }
        await this.takeOverPending();
        await this.sweep();
        this.dispatch();
        // Read ahead: a shard whose queue holds less than two reads' worth is read again (within
        // maxBufferedEntries), and what the last read brought is dispatched while this read is out,
        // so handling overlaps the round trip instead of waiting for it.
        const readable = this.shards.order.filter((s) => {
          const state = this.shards.get(s)!;
          return state.phase === 'reading' && state.queue.length < 2 * this.options.batchSize && state.held.length === 0;
        });
        const budget = this.options.maxBufferedEntries - this.shards.buffered;
        if (readable.length === 0 || budget <= 0 || !this.mayStartHandlers()) {
          await this.wakeup.wait(this.idleWaitMs());
          continue;
        }
        await this.readOnce(readable, budget);
      } catch (error) {
        if (!this.running) break;
        this.events.emit('error', new ShardError(`reading shards failed: ${(error as Error).message}`, undefined, error));
        // ioredis gives a client up for good ("end") when a (re)connect fails in certain ways (its
        // connector closed mid-way, a Sentinel lookup it may not retry): every read would fail
        // "Connection is closed." while the member keeps its shards. It is opened again here.
        if (this.reader.status === 'end') await reconnect(this.reader);
        await this.wakeup.wait(Math.min(1000, this.options.blockMs));
      }
    }
  }

  /**
   * How long past its block time a read may take before it is taken as lost (a stuck connection):
   * long enough for a slow network, short enough that the shards are read again, revocations and
   * stop() go on, well within the session timeout.
   */
  private readGraceMs(): number {
    // At least blockMs too: after a reset, ioredis resends the lost read, and the next one queues behind it.
    return Math.max(2000, Math.floor(this.options.sessionTimeoutMs / 3), this.options.blockMs);
  }

  /** Idle (or blocked in a read) until something changes, but no longer than the next due claim retry or sweep. */
  private idleWaitMs(): number {
    const now = Date.now();
    let wait = this.options.blockMs;
    for (const state of this.shards.all()) {
      if (state.phase === 'claiming') wait = Math.min(wait, state.nextClaimAt - now);
      // Paused, no sweep runs: it would fetch entries.
      if (state.phase === 'reading' && !this.isPaused()) wait = Math.min(wait, state.lastSweepAt + this.options.sweepIntervalMs - now);
    }
    return Math.max(1, wait);
  }

  private async readOnce(readable: number[], budget: number): Promise<void> {
    const count = Math.max(1, Math.min(this.options.batchSize, Math.floor(budget / readable.length)));
    // The states the read is for: if a shard is released and granted again while the read is
    // out, its entries belong to the old grant (pending here, the new grant takes them over).
    const readFor = new Map(readable.map((s) => [s, this.shards.get(s)!]));
    const cursors = readable.map((s) => readFor.get(s)!.readCursor);
    // A blocked read must not put off a sweep (lost read replies are found only there) or a claim
    // retry that is due.
    const blockMs = this.idleWaitMs();
    const done = this.polled ? this.readPolled(readable, cursors, count) : this.client.readNew(this.reader, readable, cursors, count, blockMs, blockMs + this.readGraceMs());
    this.currentRead = { shards: new Set(readable), done };
    this.dispatch();
    let result: ReadResult;
    try {
      result = await done;
    } finally {
      this.currentRead = undefined;
    }
    for (const [shardIndex, entries] of result.entries) {
      // Entries of a shard released meanwhile stay pending: its next owner (or grant) takes them over.
      const state = readFor.get(shardIndex)!;
      if (entries.length === 0 || !this.shards.isCurrent(state)) continue;
      const first = result.firstAfter.get(shardIndex) ?? '';
      if (first !== '' && first !== entries[0].id) await this.recoverSkipped(state, entries[0].id);
      if (!this.shards.isCurrent(state)) continue;
      state.readCursor = entries[entries.length - 1].id;
      this.shards.enqueue(state, entries.map((entry) => ({ entry, deliveries: 1 })));
    }
  }

  /**
   * One round of non-blocking reads on a Cluster, of the readable shards that are due: woken by a
   * write (their wake channel), or whose own pause ran out. A shard whose read found entries is
   * read again next round; one that found nothing pauses 2 ms, doubling up to 500 ms once its wake
   * channel is subscribed (50 ms until then). With none due, waits for the first (cut short by any
   * wake-up). Shards whose read failed are reported ('error', one per round) and paused as after a
   * failed read; the others' entries are delivered.
   */
  private async readPolled(readable: number[], cursors: string[], count: number): Promise<ReadResult> {
    this.listenForWrites();
    const now = Date.now();
    const due: number[] = [];
    const dueCursors: string[] = [];
    let nextAt = Number.POSITIVE_INFINITY;
    readable.forEach((shard, i) => {
      const poll = this.polls.get(this.shards.get(shard)!);
      if (this.woken.has(shard) || poll === undefined || poll.nextAt <= now) {
        due.push(shard);
        dueCursors.push(cursors[i]);
      } else nextAt = Math.min(nextAt, poll.nextAt);
    });
    if (due.length === 0) {
      await this.wakeup.wait(Math.max(1, Math.min(nextAt - now, this.idleWaitMs())));
      return { entries: new Map(), firstAfter: new Map() };
    }
    // A write that lands while this round is out wakes its shard again.
    for (const shard of due) this.woken.delete(shard);
    const result = await this.client.readEach(this.reader, due, dueCursors, count, this.readGraceMs());
    const done = Date.now();
    for (const shard of due) {
      const state = this.shards.get(shard);
      if (!state) continue;
      const previous = this.polls.get(state)?.delayMs ?? 0;
      let delayMs: number;
      if (result.failed.has(shard)) delayMs = Math.min(1000, this.options.blockMs);
      else if ((result.entries.get(shard)?.length ?? 0) > 0) delayMs = 0;
      else delayMs = Math.min(this.wakes.get(shard)?.confirmed === true ? CLUSTER_WOKEN_POLL_MAX_MS : CLUSTER_POLL_MAX_MS, Math.max(CLUSTER_POLL_MIN_MS, previous * 2));
      this.polls.set(state, { delayMs, nextAt: done + delayMs });
    }
    if (result.failed.size > 0) {
      // One report a round (a failover fails every shard of a master at once).
      const [[first, error]] = result.failed;
      const shards = [...result.failed.keys()];
      this.events.emit('error', new ShardError(`reading shard${shards.length === 1 ? '' : 's'} ${shards.join(', ')} failed: ${error.message}; reading again`, shards.length === 1 ? first : undefined, error));
    }
    return result;
  }

  /**
   * Cluster: listens on the wake channel of every shard this member holds, and stops listening on
   * those it no longer holds. A subscription that failed is tried again at the next round; until
   * Redis confirms it, the shard is polled at the short interval.
   */
  private listenForWrites(): void {
    const held = new Set(this.shards.all().filter((state) => state.phase !== 'released').map((state) => state.index));
    for (const [shard, wake] of this.wakes) {
      if (held.has(shard)) continue;
      wake.stop();
      this.wakes.delete(shard);
      this.woken.delete(shard);
    }
    for (const shard of held) {
      if (this.wakes.has(shard)) continue;
      // The hub of the member's command client: one subscriber (a connection per master) for every member made from it.
      const listening = ShardWakeHub.for(this.command as unknown as Cluster).listen(this.client.wakeChannel(shard), () => {
        this.woken.add(shard);
        this.wakeup.notify();
      });
      const wake = { stop: listening.stop, confirmed: false };
      this.wakes.set(shard, wake);
      void listening.subscribed.then((confirmed) => {
        if (this.wakes.get(shard) !== wake) return;
        if (confirmed) wake.confirmed = true;
        else {
          wake.stop();
          this.wakes.delete(shard);
        }
      });
    }
  }

  /**
   * Installs the token of each newly granted shard. A refusal (a newer token is there: the grant
   * may be stale, or the group's keys were lost while the tokens survived) keeps the shard known
   * and unread, says so each time ('error', `problems`, 'claim-refused' so the member heartbeats at
   * once), and is tried again with backoff until it succeeds or the shard is released.
   */
  private async claimNewShards(): Promise<void> {
    for (const state of this.shards.all()) {
      if (state.phase !== 'claiming' || state.nextClaimAt > Date.now()) continue;
      const claim = await this.client.claimShard(state.index, state.grantEpoch);
      if (state.phase !== 'claiming') continue;
      if (claim.claimed) {
        state.readCursor = claim.cursor;
        state.phase = 'takeover';
        state.claimAttempts = 0;
        state.problems.delete('claim');
        continue;
      }
      state.claimAttempts += 1;
      const delay = retryDelayMs(state.claimAttempts, CLAIM_RETRY_MS, CLAIM_RETRY_MAX_MS);
      state.nextClaimAt = Date.now() + delay;
      const message = `shard ${state.index}: granted at epoch ${state.grantEpoch} but a newer fencing token "${claim.holder}" holds it; not reading it (refused ${state.claimAttempts} time(s))`;
      state.problems.set('claim', message);
      this.events.emit('error', new ShardError(`${message}, trying again in ${delay} ms`, state.index));
      this.events.emit('claim-refused', { shardIndex: state.index, grantEpoch: state.grantEpoch, holder: claim.holder });
    }
  }

  /** Pending entries of a newly gained shard come first, in ID order, page by page as room allows. */
  private async takeOverPending(): Promise<void> {
    for (const state of this.shards.all()) {
      while (state.phase === 'takeover' && state.queue.length < this.options.batchSize) {
        const page = await this.accept(state, await this.client.claimPending(state.index, state.grantEpoch, 'all', state.takeoverCursor, this.options.batchSize), 'while taking over its pending entries');
        if (!page) break;
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
   * before the batch, so the shard's order holds. Only entries before the batch move: one after it
   * (another consumer's late read of a newer entry) is left where the sweep finds it.
   */
  private async recoverSkipped(state: ShardState, before: string): Promise<void> {
    let start = nextStreamId(state.readCursor);
    let recovered = 0;
    for (;;) {
      const page = await this.accept(state, await this.client.claimPendingRange(state.index, state.grantEpoch, start, before, this.options.batchSize), '(fencing token changed)');
      if (!page) return;
      recovered += page.entries.length;
      if (page.cursor === '0-0') break;
      start = nextStreamId(page.cursor);
    }
    this.events.emit('error', new ShardError(`shard ${state.index}: ${recovered} entries before ${before} were delivered elsewhere (a late read); took them over first`, state.index));
  }

  /**
   * Both sweeps of each shard being read, every `sweepIntervalMs`. The shard starts no handler until
   * both have queued what they found (the caller dispatches after): a zombie's entries and this
   * member's own lost ones interleave by id, so neither part's entries may run before the other's
   * older ones are queued.
   */
  private async sweep(): Promise<void> {
    const now = Date.now();
    for (const state of this.shards.all()) {
      if (state.phase !== 'reading' || now - state.lastSweepAt < this.options.sweepIntervalMs) continue;
      state.lastSweepAt = now;
      state.sweeping = true;
      try {
        const page = await this.accept(state, await this.client.claimPending(state.index, state.grantEpoch, 'others', '0-0', this.options.batchSize), '(fencing token changed)');
        // Other consumers' entries after the page's cursor are left for the next sweep: own lost
        // entries after them must wait too, or they would run first.
        if (page) await this.recoverUntracked(state, page.cursor === '0-0' ? undefined : page.cursor);
      } finally {
        state.sweeping = false;
      }
    }
  }

  /**
   * Entries pending under this member that it does not track (not queued, held, in flight, or
   * awaiting their ack) were delivered in a read reply that never arrived, or their ack was given up
   * on. On a quiet shard no later read would reveal them, so they are claimed again and queued in ID
   * order, before anything after them that has not started. Only those up to `upTo`, when given.
   */
  private async recoverUntracked(state: ShardState, upTo?: string): Promise<void> {
    const tracked = new Set([...this.shards.buffers(state), ...inFlightIds(state)]);
    // Enough to see past everything tracked: untracked entries, if any, are among the first ones.
    const ids = await this.client.ownPending(state.index, tracked.size + this.acks.unsettledCount(state.index) + this.options.batchSize);
    if (!this.shards.isCurrent(state)) return;
    const acking = this.acks.unsettledIds(state.index);
    const untracked = ids.filter((id) => !tracked.has(id) && !isInFlight(state, id) && !acking.has(id) && !this.isQueued(state, id) && (upTo === undefined || compareStreamIds(id, upTo) <= 0));
    if (untracked.length === 0) return;
    const page = await this.accept(state, await this.client.claimIds(state.index, state.grantEpoch, untracked), '(fencing token changed)');
    if (page && page.entries.length > 0) {
      this.events.emit('error', new ShardError(`shard ${state.index}: ${page.entries.length} entries pending here were not being handled (a read reply that never arrived, or an ack given up on): ${page.entries.map((e) => e.id).join(', ')}; handling them now`, state.index));
    }
  }

  /** The entry is queued or held now (the lists may have changed while a call was out). */
  private isQueued(state: ShardState, id: string): boolean {
    return state.queue.some((q) => q.entry.id === id) || state.held.some((q) => q.entry.id === id);
  }

  /**
   * Takes a claimed page into the shard: null (and the shard given up locally) when fenced; else
   * its entries are queued in ID order, the read cursor moves past them (so that a later gap check
   * does not claim them again), and ids deleted from the stream while pending are reported.
   */
  private async accept(state: ShardState, page: ClaimResult, when: string): Promise<ClaimedPage | null> {
    if (page.fenced) {
      this.shards.lose(state, `shard ${state.index} has a newer owner (its fencing token refused a takeover)`);
      this.events.emit('error', new ShardError(`shard ${state.index}: lost ${when}`, state.index));
      return null;
    }
    if (page.deleted.length > 0) {
      this.events.emit('error', new ShardError(`shard ${state.index}: entries ${page.deleted.join(', ')} were deleted from the stream (trimmed or XDEL) before they were handled; they cannot be processed`, state.index));
    }
    const entries = await this.withDeliveryCounts(state.index, page.entries);
    if (!this.shards.isCurrent(state)) return null;
    // Not already queued here: a sweep may meet an entry the gap check took a moment ago.
    const fresh = entries.filter((q) => !this.isQueued(state, q.entry.id) && !isInFlight(state, q.entry.id));
    this.shards.enqueue(state, fresh);
    this.advanceCursor(state, page.entries);
    return page;
  }

  /**
   * Entries taken over are accounted for: a later check must not take them again (they may be
   * queued or in flight here, pending under this member's name).
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
}
