import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import type { Cluster } from 'ioredis';
import type { ClusterReadHub } from '../../redis/read-hubs/cluster-read-hub';
import type { ReadResult, ShardClient } from '../../redis/shard-client';
import type { RedisClient } from '../../redis/scripts';
import { ShardWakeHub } from '../../redis/read-hubs/shard-wake-hub';
import type { Wakeup } from '../abortable-sleep';
import type { ResolvedMemberOptions } from '../member-options';
import { type PollerEvents, type ShardSet, type ShardState } from '../shard-state';

/**
 * On a Redis Cluster reads do not block (one XREADGROUP cannot span shards' slots): until a shard's
 * wake channel is subscribed, after a read that found nothing the next waits this long, doubling up
 * to the max, and at once after one that found entries or when anything wakes the reader (a shard
 * drained, granted, released).
 */
const CLUSTER_POLL_MIN_MS = 2;
const CLUSTER_POLL_MAX_MS = 50;
/**
 * The pause of a shard read to its end once it is subscribed to its wake channel (a producer's
 * write wakes the reader at once, ShardWakeHub): what a lost wake-up, or an entry written by
 * something other than a StreamProducer, may wait.
 */
const CLUSTER_WOKEN_POLL_MAX_MS = 500;

/** Where a member reads on a Cluster: the process's ClusterReadHub, woken through its command client's ShardWakeHub. */
export interface PolledTransport {
  polled: ClusterReadHub;
  command: RedisClient;
}

/**
 * The read side of a member on a Redis Cluster (ShardReader's 'polled' mode): each shard is read on
 * its own, when a write woke it (its wake channel, one sharded subscriber per client) or when its
 * own pause ran out. Keeps, per shard, its pause, whether a write rang since its last read, and its
 * wake channel's subscription.
 */
export class ClusterPolling {
  /** A shard's grant -> its pause after its last read, and when it is due again (a new grant is due at once). */
  private readonly polls = new WeakMap<ShardState, { delayMs: number; nextAt: number }>();
  /** Shards whose wake channel a write rang since their last read. */
  private readonly woken = new Set<number>();
  /** shardIndex -> its wake channel's subscription (`confirmed` once Redis answered it). */
  private readonly wakes = new Map<number, { stop: () => void; confirmed: boolean }>();

  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    /** The reader's wake-up: a write that rings a shard notifies it. */
    private readonly wakeup: Wakeup,
    /** How long the reader may wait now (the next due claim retry or sweep), and a read's grace past it. */
    private readonly idleWaitMs: () => number,
    private readonly readGraceMs: () => number,
  ) {}

  /** Whether a write rang the shard since its last read. */
  wasWoken(shardIndex: number): boolean {
    return this.woken.has(shardIndex);
  }

  /** Stops listening on every wake channel. */
  stop(): void {
    for (const wake of this.wakes.values()) wake.stop();
    this.wakes.clear();
  }

  /**
   * One round of non-blocking reads on a Cluster, of the readable shards that are due: woken by a
   * write (their wake channel), or whose own pause ran out. A shard whose read came back full is
   * read again next round. Subscribed, a shard read to its end waits for its wake-up, or 500 ms
   * (a lost wake-up, a bare XADD); not subscribed yet, it is read again next round after a read
   * that found entries, else after 2 ms, doubling up to 50 ms. With none due, waits for the first
   * (cut short by any wake-up). Shards whose read failed are reported ('error', one per round) and
   * paused as after a failed read; the others' entries are delivered. `failed` names them (the
   * reader claims again a shard whose keys are gone). The room the due shards' reads may fill is
   * reserved (`reserve`) only while they are out, not while the round waits for a due shard: the
   * result's `release` gives it back once the reader queued what they brought.
   */
  async read(
    transport: PolledTransport,
    readable: number[],
    cursors: string[],
    count: number,
    reserve: (count: number) => () => void,
  ): Promise<ReadResult & { failed?: Map<number, Error>; release?: () => void }> {
    this.listenForWrites(transport.command);
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
    const release = reserve(due.length * count);
    let result: Awaited<ReturnType<ShardClient['readEach']>>;
    try {
      result = await this.client.readEach(transport.polled, due, dueCursors, count, this.readGraceMs());
    } catch (error) {
      release();
      throw error;
    }
    const done = Date.now();
    for (const shard of due) {
      const state = this.shards.get(shard);
      if (!state) continue;
      const previous = this.polls.get(state)?.delayMs ?? 0;
      let delayMs: number;
      const found = result.entries.get(shard)?.length ?? 0;
      const subscribed = this.wakes.get(shard)?.confirmed === true;
      if (result.failed.has(shard)) delayMs = Math.min(1000, this.options.blockMs);
      else if (found >= count || (found > 0 && !subscribed)) delayMs = 0;
      // Read to its end, and a write wakes it (the wake of a write that lands while this round was
      // out marked the shard again): polling it again is only for a lost wake-up or a bare XADD.
      else if (subscribed) delayMs = CLUSTER_WOKEN_POLL_MAX_MS;
      else delayMs = Math.min(CLUSTER_POLL_MAX_MS, Math.max(CLUSTER_POLL_MIN_MS, previous * 2));
      this.polls.set(state, { delayMs, nextAt: done + delayMs });
    }
    if (result.failed.size > 0) {
      // One report a round (a failover fails every shard of a master at once).
      const [[first, error]] = result.failed;
      const shards = [...result.failed.keys()];
      this.events.emit(
        'error',
        new ShardError(
          `reading shard${shards.length === 1 ? '' : 's'} ${shards.join(', ')} failed: ${error.message}; reading again`,
          shards.length === 1 ? first : undefined,
          error,
        ),
      );
    }
    return Object.assign(result, { release });
  }

  /**
   * Cluster: listens on the wake channel of every shard this member holds, and stops listening on
   * those it no longer holds. A subscription that failed is tried again at the next round; until
   * Redis confirms it, the shard is polled at the short interval.
   */
  private listenForWrites(command: RedisClient): void {
    const held = new Set(
      this.shards
        .all()
        .filter((state) => state.phase !== 'released')
        .map((state) => state.index),
    );
    for (const [shard, wake] of this.wakes) {
      if (held.has(shard)) continue;
      wake.stop();
      this.wakes.delete(shard);
      this.woken.delete(shard);
    }
    for (const shard of held) {
      if (this.wakes.has(shard)) continue;
      // The hub of the member's command client: one subscriber (a connection per master) for every member made from it.
      const listening = ShardWakeHub.for(command as Cluster).listen(this.client.wakeChannel(shard), () => {
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
}
