import type { EventEmitter } from 'node:events';
import type { ShardClient } from '../redis/shard-client';
import { sleep } from './abortable-sleep';
import { retryDelayMs } from './member-options';
import { type PollerEvents, ShardError, type ShardState } from './shard-state';

/** Tries of one acknowledgement batch when Redis cannot be reached (about 10 s of backoff in all). */
const ACK_ATTEMPTS = 8;

/**
 * Acknowledges finished entries under their shard's fencing token, batched per shard and sent
 * together (pipelined) once the current burst of work settles. It knows every id whose ack has not
 * landed yet (batched, being sent, or waiting to be sent again), so that the poller neither takes
 * such an entry for lost nor reports a shard released before its acks are in.
 */
/** What became of an acknowledgement: it landed, a newer owner's token refused it, or it could not be sent. */
export type AckOutcome = 'accepted' | 'refused' | 'unsent';
type AckWaiter = (outcome: AckOutcome) => void;

export class AckBatcher {
  private readonly batches = new Map<number, { grantEpoch: number; ids: string[]; waiters: AckWaiter[] }>();
  private flushing: Promise<void> | undefined;
  /** shardIndex -> ids not acknowledged yet (batched or being sent). */
  private readonly unsettled = new Map<number, Map<string, number>>();
  /** shardIndex -> sends under way (with their retries). */
  private readonly sending = new Map<number, Set<Promise<void>>>();

  constructor(
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    /** False once the poller stopped: failed sends are not tried again then. */
    private readonly running: () => boolean,
  ) {}

  /** Queues the ack of `id` (or of several ids, one batch's); `onSettled` learns what became of it. */
  queue(state: ShardState, id: string | string[], onSettled?: AckWaiter): void {
    let batch = this.batches.get(state.index);
    if (!batch || batch.grantEpoch !== state.grantEpoch) {
      if (batch) void this.flush();
      batch = { grantEpoch: state.grantEpoch, ids: [], waiters: [] };
      this.batches.set(state.index, batch);
    }
    const ids = typeof id === 'string' ? [id] : id;
    for (const one of ids) batch.ids.push(one);
    if (onSettled) batch.waiters.push(onSettled);
    this.track(state.index, ids, 1);
    this.flushing ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.flush());
  }

  /** Whether the ack of this entry has not landed yet. */
  tracks(shardIndex: number, id: string): boolean {
    return this.unsettled.get(shardIndex)?.has(id) ?? false;
  }

  /** How many entries of the shard await their ack. */
  unsettledCount(shardIndex: number): number {
    return this.unsettled.get(shardIndex)?.size ?? 0;
  }

  /**
   * Sends every batch now; resolves when each send (with its retries) is over, and every send
   * already under way too: a burst's own flush may have just taken the batch a stopping member
   * flushes for, and the member must not leave while that ack is still on the wire (the next owner
   * would run its entries again).
   */
  async flush(): Promise<void> {
    this.flushing = undefined;
    const batches = [...this.batches];
    this.batches.clear();
    const underWay = [...this.sending.values()].flatMap((sends) => [...sends]);
    await Promise.all([...underWay, ...batches.map(([shardIndex, { grantEpoch, ids, waiters }]) => this.send(shardIndex, grantEpoch, ids, waiters))]);
  }

  /**
   * Resolves when every ack of the shard queued so far has landed, been refused, or given up on;
   * or after `timeoutMs`, whichever is first. Returns whether they all settled.
   */
  async settled(shardIndex: number, timeoutMs: number): Promise<boolean> {
    const batch = this.batches.get(shardIndex);
    if (batch) {
      this.batches.delete(shardIndex);
      void this.send(shardIndex, batch.grantEpoch, batch.ids, batch.waiters);
    }
    const sends = [...(this.sending.get(shardIndex) ?? [])];
    if (sends.length === 0) return true;
    const all = Promise.all(sends).then(() => true);
    return Promise.race([all, sleep(timeoutMs).then(() => false)]);
  }

  private send(shardIndex: number, grantEpoch: number, ids: string[], waiters: AckWaiter[]): Promise<void> {
    const sends = this.sending.get(shardIndex) ?? new Set<Promise<void>>();
    this.sending.set(shardIndex, sends);
    const sent: Promise<void> = this.sendWithRetries(shardIndex, grantEpoch, ids).then((outcome) => {
      for (const waiter of waiters) waiter(outcome);
    }).finally(() => {
      sends.delete(sent);
      if (sends.size === 0 && this.sending.get(shardIndex) === sends) this.sending.delete(shardIndex);
      this.track(shardIndex, ids, -1);
    });
    sends.add(sent);
    return sent;
  }

  /**
   * One fenced acknowledgement batch. A failure to reach Redis is retried with backoff while the
   * poller runs (a restart or a reset must not leave finished entries pending here for good); after
   * the last attempt they stay pending, and the owner's sweep of its own untracked entries (or the
   * shard's next owner) processes them again.
   */
  private async sendWithRetries(shardIndex: number, grantEpoch: number, ids: string[]): Promise<AckOutcome> {
    for (let attempt = 1; ; attempt++) {
      try {
        const { acked, notReplicated } = await this.client.ack(shardIndex, grantEpoch, ids);
        this.events.emit('acknowledged', { shardIndex, grantEpoch, ids, accepted: acked !== -1 });
        if (notReplicated) {
          // Not retried: the ack is on the master; only a failover before it replicates undoes it (a redelivery).
          this.events.emit('error', new ShardError(`shard ${shardIndex}: ${ids.length} acknowledgement(s) ${notReplicated.message}; a failover now would deliver them again`, shardIndex, notReplicated));
        }
        if (acked === -1) {
          this.events.emit('error', new ShardError(`shard ${shardIndex}: ${ids.length} acknowledgement(s) refused, the shard has a new owner; it will process them again`, shardIndex));
        }
        return acked === -1 ? 'refused' : 'accepted';
      } catch (error) {
        const retry = this.running() && attempt < ACK_ATTEMPTS;
        this.events.emit('error', new ShardError(`shard ${shardIndex}: acknowledging ${ids.length} entries failed${retry ? ', retrying' : '; they stay pending'}`, shardIndex, error));
        if (!retry) return 'unsent';
        await sleep(retryDelayMs(attempt, 50, 2000));
      }
    }
  }

  /** Counts, since one id can be queued twice (e.g. under two grants of the shard). */
  private track(shardIndex: number, ids: string[], delta: 1 | -1): void {
    let counts = this.unsettled.get(shardIndex);
    if (!counts) {
      if (delta < 0) return;
      counts = new Map();
      this.unsettled.set(shardIndex, counts);
    }
    for (const id of ids) {
      const next = (counts.get(id) ?? 0) + delta;
      if (next > 0) counts.set(id, next);
      else counts.delete(id);
    }
    if (counts.size === 0) this.unsettled.delete(shardIndex);
  }
}
