import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import { compareStreamIds, nextStreamId } from '../../protocol/stream-ids';
import type { ClaimResult, RawEntry, ShardClient } from '../../redis/shard-client';
import type { AckBatcher } from '../handle/ack-batcher';
import { withTimeout } from '../abortable-sleep';
import { commandCallTimeoutMs, type ResolvedMemberOptions, retryDelayMs } from '../member-options';
import { forShardsSideBySide } from './shards-side-by-side';
import { inFlightIds, isInFlight, type PollerEvents, type QueuedEntry, type ShardSet, type ShardState } from '../shard-state';

type ClaimedPage = Extract<ClaimResult, { fenced: false }>;

/** Backoff of a shard's claim or takeover that failed or was refused: from this, doubling, up to the max. */
const SHARD_RETRY_MS = 100;
const SHARD_RETRY_MAX_MS = 5000;

/**
 * One more failed (or refused) try of the shard's claim or takeover: counts it and sets when the
 * next is due; returns the delay. Per shard, so that one shard's trouble holds only that shard
 * while the others are claimed and read (SPEC 10.8).
 */
export function backOffShard(state: ShardState): number {
  state.claimAttempts += 1;
  const delay = retryDelayMs(state.claimAttempts, SHARD_RETRY_MS, SHARD_RETRY_MAX_MS);
  state.nextClaimAt = Date.now() + delay;
  return delay;
}

/**
 * A shard's claim or takeover failed or was refused: backed off, a `problems`
 * line (`problem`) saying so until it succeeds, and one 'error' per setback naming when it is tried
 * again. `describe` gets the attempts so far. The other shards go on (SPEC 10.8).
 */
export function setBackShard(
  state: ShardState,
  events: EventEmitter<PollerEvents>,
  problem: 'claim' | 'takeover',
  describe: (attempts: number) => string,
  cause?: unknown,
): void {
  const delay = backOffShard(state);
  const message = describe(state.claimAttempts);
  state.problems.set(problem, message);
  events.emit('error', new ShardError(`${message}, trying again in ${delay} ms`, state.index, cause));
}

/**
 * The most shards one turn of the read loop sweeps (the longest overdue first); the rest go in the
 * next turns, after a read. A member holding every shard of a large stream (up to MAX_SHARD_COUNT)
 * would otherwise spend whole turns sweeping, two calls per shard, and read nothing meanwhile.
 */
export const SWEPT_SHARDS_PER_TURN = 1024;

/**
 * Shards gained together (every shard of a process's members at start, a member's share after a
 * rebalance) would be swept together every `sweepIntervalMs`: a burst of two calls per shard, all
 * members of a process at once, which the reads and heartbeats of that moment wait behind (a
 * rebalance that meets it takes many times as long, a new entry's latency its tail). A shard's sweeps
 * run in one of this many phases of the interval instead, by its index: each burst is this much
 * smaller, and a member's read loop wakes for sweeps at most this many times per interval.
 */
export const SWEEP_PHASES = 8;

/** How much earlier than the interval after its gain a shard is first swept: its phase (SWEEP_PHASES). */
export function sweepPhaseMs(shardIndex: number, sweepIntervalMs: number): number {
  return Math.floor(((shardIndex % SWEEP_PHASES) * sweepIntervalMs) / SWEEP_PHASES);
}

/**
 * What the reader does besides reading new entries: it takes pending entries into a shard's queue
 * under the shard's fencing token, in ID order. A newly gained shard's pending entries (the previous
 * owner's unacknowledged work) come first; entries a read skipped (delivered elsewhere: a zombie's
 * late read, or a reply of this member's that never arrived) are taken before the batch that
 * revealed them; and every `sweepIntervalMs` two sweeps find what no read reveals: other consumers'
 * pending entries, and this member's own that it does not track.
 */
export class ShardRecovery {
  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly acks: AckBatcher,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /**
   * A call on the command connection, bounded (commandCallTimeoutMs, SPEC 10.1): one
   * stuck on a silent connection would hold the read loop, every shard's reads with it, with no
   * error. Past the bound it fails like any failed call (`error`, tried again on the next loop); if
   * it ran after all, what it claimed is pending here untracked, and the own-pending sweep takes it.
   */
  private bounded<R>(call: Promise<R>): Promise<R> {
    return withTimeout(call, commandCallTimeoutMs(this.options));
  }

  /**
   * Pending entries of a newly gained shard come first, in ID order, page by page as room allows
   * (each page asks for no more than the buffer's room, reserved until it is queued: a member gaining
   * many shards at once must not buffer past the hub's budget). The room is split evenly over the
   * shards taken over in the turn, those with the fewest entries queued first: a page asking for a
   * whole batch, in shard order, gave the room to the first few shards and left the others waiting
   * in 'takeover', unread, turn after turn, while the reads gave the room to the shards already
   * taken over (1 worker, 16 shards with a backlog each: the first shard ran 153 of the first 1,600
   * entries, the last one 33; member-failures' fairness test). A page that fails is one 'error' and
   * a `problems` line naming the shard, tried again with backoff (the shard stays unread meanwhile);
   * the other shards are taken over and read as usual. Returns whether a shard's takeover waits for
   * room (the reader wakes when there is).
   */
  async takeOverPending(): Promise<boolean> {
    const now = Date.now();
    const taking = this.shards
      .all()
      .filter((state) => state.phase === 'takeover' && state.nextClaimAt <= now)
      .sort((a, b) => a.queue.length - b.queue.length || a.index - b.index);
    // Each shard's part of the room (one entry at least: with less room than shards, the first
    // `room` of them take one each, and the others are first in the next turn's order).
    const part = Math.max(1, Math.floor(this.shards.room(this.options.maxBufferedEntries) / Math.max(1, taking.length)));
    let waitsForRoom = false;
    await forShardsSideBySide(taking, async (state) => {
      try {
        while (state.phase === 'takeover' && state.queue.length < this.options.batchSize) {
          const count = Math.min(this.options.batchSize, part, this.shards.room(this.options.maxBufferedEntries));
          if (count === 0) {
            waitsForRoom = true;
            break;
          }
          const release = this.shards.reserve(count);
          let page: ClaimedPage | null;
          try {
            page = await this.accept(
              state,
              await this.bounded(this.client.claimPending(state.index, state.grantEpoch, 'all', state.takeoverCursor, count)),
              'while taking over its pending entries',
            );
          } finally {
            release();
          }
          if (!page) break;
          state.takeoverCursor = page.cursor;
          state.claimAttempts = 0;
          state.problems.delete('takeover');
          if (page.cursor === '0-0') state.phase = 'reading';
        }
      } catch (error) {
        if (!this.shards.isCurrent(state)) return;
        setBackShard(
          state,
          this.events,
          'takeover',
          (attempts) =>
            `shard ${state.index}: taking over its pending entries failed (${(error as Error).message}); not reading it (failed ${attempts} time(s))`,
          error,
        );
      }
    });
    return waitsForRoom;
  }

  /**
   * A read returned entries of a shard, but not the first entry after what this member had accounted
   * for (`readNew`'s check): the ones in between were delivered to another consumer after this
   * member took the shard (a zombie's read that reached Redis late, e.g. after a partition healed),
   * or to this member in a reply that never arrived. They are taken over now, in ID order, and queued
   * before the batch, so the shard's order holds. Only entries before the batch move: one after it
   * (another consumer's late read of a newer entry) is left where the sweep finds it.
   */
  async recoverSkipped(state: ShardState, before: string): Promise<void> {
    let start = nextStreamId(state.readCursor);
    let recovered = 0;
    for (;;) {
      const page = await this.accept(
        state,
        await this.bounded(this.client.claimPendingRange(state.index, state.grantEpoch, start, before, this.options.batchSize)),
        '(fencing token changed)',
      );
      if (!page) return;
      recovered += page.entries.length;
      if (page.cursor === '0-0') break;
      start = nextStreamId(page.cursor);
    }
    this.events.emit(
      'error',
      new ShardError(
        `shard ${state.index}: ${recovered} entries before ${before} were delivered elsewhere (a late read); took them over first`,
        state.index,
      ),
    );
  }

  /**
   * Both sweeps of each shard being read, every `sweepIntervalMs`. The shard starts no handler until
   * both have queued what they found (the caller dispatches after): a zombie's entries and this
   * member's own lost ones interleave by id, so neither part's entries may run before the other's
   * older ones are queued.
   */
  async sweep(): Promise<void> {
    const now = Date.now();
    const due = this.shards
      .all()
      .filter((state) => state.phase === 'reading' && now - state.lastSweepAt >= this.options.sweepIntervalMs)
      .sort((a, b) => a.lastSweepAt - b.lastSweepAt)
      .slice(0, SWEPT_SHARDS_PER_TURN);
    await forShardsSideBySide(due, async (state) => {
      state.lastSweepAt = now;
      state.sweeping = true;
      // A sweep that fails is one 'error' naming the shard, tried again at the next interval; the
      // other shards' sweeps and every shard's reads go on (SPEC 10.8).
      try {
        const page = await this.accept(
          state,
          await this.bounded(this.client.claimPending(state.index, state.grantEpoch, 'others', '0-0', this.options.batchSize)),
          '(fencing token changed)',
        );
        // Other consumers' entries after the page's cursor are left for the next sweep: own lost
        // entries after them must wait too, or they would run first.
        if (page) await this.recoverUntracked(state, page.cursor === '0-0' ? undefined : page.cursor);
      } catch (error) {
        this.events.emit(
          'error',
          new ShardError(
            `shard ${state.index}: sweeping it failed (${(error as Error).message}); tried again in ${this.options.sweepIntervalMs} ms`,
            state.index,
            error,
          ),
        );
      } finally {
        state.sweeping = false;
      }
    });
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
    const ids = await this.bounded(
      this.client.ownPending(state.index, tracked.size + this.acks.unsettledCount(state.index) + this.options.batchSize),
    );
    if (!this.shards.isCurrent(state)) return;
    const acking = this.acks.unsettledIds(state.index);
    const untracked = ids.filter(
      (id) =>
        !tracked.has(id) &&
        !isInFlight(state, id) &&
        !acking.has(id) &&
        !this.isQueued(state, id) &&
        (upTo === undefined || compareStreamIds(id, upTo) <= 0),
    );
    if (untracked.length === 0) return;
    const page = await this.accept(
      state,
      await this.bounded(this.client.claimIds(state.index, state.grantEpoch, untracked)),
      '(fencing token changed)',
    );
    if (page && page.entries.length > 0) {
      this.events.emit(
        'error',
        new ShardError(
          `shard ${state.index}: ${page.entries.length} entries pending here were not being handled (a read reply that never arrived, or an ack given up on): ${page.entries.map((e) => e.id).join(', ')}; handling them now`,
          state.index,
        ),
      );
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
      this.events.emit(
        'error',
        new ShardError(
          `shard ${state.index}: entries ${page.deleted.join(', ')} were deleted from the stream (trimmed or XDEL) before they were handled; they cannot be processed`,
          state.index,
        ),
      );
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
    const counts = await this.bounded(
      this.client.deliveryCounts(shardIndex, entries[0].id, entries[entries.length - 1].id, entries.length),
    );
    return entries.map((entry) => ({ entry, deliveries: counts.get(entry.id) ?? 1 }));
  }
}
