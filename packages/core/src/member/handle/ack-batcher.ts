import { ShardError } from '../consumption-errors';
import type { EventEmitter } from 'node:events';
import type { AckBatch, ShardAck, ShardClient } from '../../redis/shard-client';
import { NoAnswerError, sleep, withTimeout } from '../abortable-sleep';
import { retryDelayMs } from '../member-options';
import { type PollerEvents, type ShardState } from '../shard-state';

/** Tries of one acknowledgement batch when Redis cannot be reached (about 10 s of backoff in all). */
const ACK_ATTEMPTS = 8;
/**
 * How long finished entries gather before their acknowledgements are sent, when nobody waits on
 * them: at tens of thousands of entries a second a send per event-loop turn was a fenced call for a
 * few dozen ids, and those calls were a sixth of the member's CPU. 5 ms, not 2: a member of many
 * shards whose handlers each take a millisecond or so (64 shards, 64 workers) finishes one or two
 * entries per shard in 2 ms, and each shard in a call costs Redis its token check and its own
 * XACK, and the member a call per few dozen entries. An ack someone awaits (manual `message.ack()`),
 * and a batch this large, go at the end of the turn as before. Stopping, revoking and the sweep do
 * not wait for it (flush and settled send at once); a crash in between only leaves these few
 * milliseconds of entries pending for the next owner, as any unsent ack does.
 */
export const ACK_LINGER_MS = 5;
const ACK_SEND_NOW = 512;
/**
 * Ack calls in a row that got no answer within their bound before the connection they go on is
 * reset (when it is the member's own: `ackWaitForReplicas`). Two, as for heartbeats: one slow
 * answer is not a stuck connection.
 */
export const ACK_NO_ANSWERS_BEFORE_RESET = 2;
/** The bound of one ack call when the member gives none (unit tests): a third of the default session. */
const DEFAULT_ACK_CALL_TIMEOUT_MS = 5000;

/**
 * How the acknowledgements' connection is watched (SPEC 10.1: every call has a deadline; a
 * connection that stops answering without closing is reset, and says so while it lasts).
 */
export interface AckConnectionWatch {
  /** How long one ack call may take (its `WAIT` included) before it counts as unanswered and is retried. */
  callTimeoutMs: number;
  /**
   * Resets the connection acknowledgements go on and says what it did; absent when that is the
   * command connection (the heartbeat loop watches it, and resets it with `resetStuckConnection`).
   */
  reset?: () => string;
}

/** What became of an acknowledgement: it landed, a newer owner's token refused it, or it could not be sent. */
export type AckOutcome = 'accepted' | 'refused' | 'unsent';
type AckWaiter = (outcome: AckOutcome) => void;
/** One shard's batch as sent: its acknowledgements and who waits for their outcome. */
type SentBatch = AckBatch & { state: ShardState; waiters: AckWaiter[] };

/** A batch as sent: the shard and grant its acks are for come from the grant they ran under. */
function toSent(batch: { state: ShardState; ids: string[]; waiters: AckWaiter[] }): SentBatch {
  return { shardIndex: batch.state.index, grantEpoch: batch.state.grantEpoch, ...batch };
}

/**
 * Acknowledges finished entries under their shard's fencing token, batched per shard, every shard's
 * batch in one fenced call (ShardClient.ackMany: each shard's token checked on its own) after
 * ACK_LINGER_MS (at the end of the event-loop turn when someone awaits the ack). It knows every id whose ack has not landed yet (batched, being
 * sent, or waiting to be sent again), so that the poller neither takes such an entry for lost nor
 * reports a shard released before its acks are in.
 */
export class AckBatcher {
  /** shardIndex -> the acks batched for the grant (`state`) the entries ran under. */
  private readonly batches = new Map<number, { state: ShardState; ids: string[]; waiters: AckWaiter[] }>();
  /** The flush that is due: at the end of this turn (`soon`) or after the linger. */
  private due: { soon: boolean; cancel: () => void } | undefined;
  /** Ids batched and not yet sent. */
  private batched = 0;
  /**
   * shardIndex -> the id lists of its batches whose ack has not landed yet (batched or being sent).
   * Kept as the batches' own arrays, not per id: an ack costs nothing per entry here, and the
   * lookups (`unsettledIds`, `unsettledCount`) are the sweep's, once per `sweepIntervalMs`.
   */
  private readonly unsettled = new Map<number, Set<string[]>>();
  /** shardIndex -> sends under way (with their retries). */
  private readonly sending = new Map<number, Set<Promise<void>>>();
  /** Ack calls in a row that got no answer within `callTimeoutMs`. */
  private noAnswersInARow = 0;
  /** The problems line while ack calls go unanswered (cleared by the next answer). */
  private unanswered: string | undefined;

  constructor(
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    /** False once the poller stopped: failed sends are not tried again then. */
    private readonly running: () => boolean,
    /** A newer owner's fencing token refused acks of this grant of a shard: that grant is over. */
    private readonly refused: (state: ShardState) => void = () => undefined,
    private readonly lingerMs = ACK_LINGER_MS,
    private readonly connection: AckConnectionWatch = { callTimeoutMs: DEFAULT_ACK_CALL_TIMEOUT_MS },
  ) {}

  /** A problems line while acknowledgements get no answer (a stuck connection), else undefined. */
  problem(): string | undefined {
    return this.unanswered;
  }

  /** Queues the ack of `id` (or of several ids, one batch's); `onSettled` learns what became of it. */
  queue(state: ShardState, id: string | string[], onSettled?: AckWaiter): void {
    let batch = this.batches.get(state.index);
    if (!batch || batch.state !== state) {
      if (batch) void this.flush();
      batch = { state, ids: [], waiters: [] };
      this.batches.set(state.index, batch);
      this.track(state.index, batch.ids);
    }
    if (typeof id === 'string') {
      batch.ids.push(id);
      this.batched += 1;
    } else {
      for (const one of id) batch.ids.push(one);
      this.batched += id.length;
    }
    if (onSettled) batch.waiters.push(onSettled);
    this.schedule(onSettled !== undefined || this.batched >= ACK_SEND_NOW || this.lingerMs <= 0);
  }

  /** Makes a flush due: at the end of this event-loop turn, or once the linger passed. */
  private schedule(soon: boolean): void {
    if (this.due && (this.due.soon || !soon)) return;
    this.due?.cancel();
    if (soon) {
      const immediate = setImmediate(() => void this.flush());
      this.due = { soon, cancel: () => clearImmediate(immediate) };
    } else {
      const timer = setTimeout(() => void this.flush(), this.lingerMs);
      this.due = { soon, cancel: () => clearTimeout(timer) };
    }
  }

  /** The entries of the shard whose ack has not landed yet. */
  unsettledIds(shardIndex: number): Set<string> {
    const all = new Set<string>();
    for (const ids of this.unsettled.get(shardIndex) ?? []) for (const id of ids) all.add(id);
    return all;
  }

  /** How many entries of the shard await their ack (an id queued twice, under two grants, counts twice). */
  unsettledCount(shardIndex: number): number {
    let count = 0;
    for (const ids of this.unsettled.get(shardIndex) ?? []) count += ids.length;
    return count;
  }

  /**
   * Sends every batch now, all shards in one call; resolves when it (with its retries) is over, and
   * every send already under way too: a burst's own flush may have just taken the batch a stopping
   * member flushes for, and the member must not leave while that ack is still on the wire (the next
   * owner would run its entries again).
   */
  async flush(): Promise<void> {
    this.due?.cancel();
    this.due = undefined;
    const batches = [...this.batches.values()].map(toSent);
    this.batches.clear();
    this.batched = 0;
    const underWay = [...new Set([...this.sending.values()].flatMap((sends) => [...sends]))];
    await Promise.all([...underWay, batches.length > 0 ? this.send(batches) : undefined]);
  }

  /**
   * Resolves when every ack of the shard queued so far has landed, been refused, or given up on;
   * or after `timeoutMs`, whichever is first. Returns whether they all settled.
   */
  async settled(shardIndex: number, timeoutMs: number): Promise<boolean> {
    const batch = this.batches.get(shardIndex);
    if (batch) {
      this.batches.delete(shardIndex);
      this.batched -= batch.ids.length;
      void this.send([toSent(batch)]);
    }
    const sends = [...(this.sending.get(shardIndex) ?? [])];
    if (sends.length === 0) return true;
    const all = Promise.all(sends).then(() => true);
    return Promise.race([all, sleep(timeoutMs).then(() => false)]);
  }

  private send(batches: SentBatch[]): Promise<void> {
    const sent: Promise<void> = this.sendWithRetries(batches)
      .then((outcomes) => {
        batches.forEach(({ waiters }, i) => {
          for (const waiter of waiters) waiter(outcomes[i]);
        });
      })
      .finally(() => {
        for (const { shardIndex, ids } of batches) {
          const sends = this.sending.get(shardIndex);
          sends?.delete(sent);
          if (sends?.size === 0) this.sending.delete(shardIndex);
          this.untrack(shardIndex, ids);
        }
      });
    for (const { shardIndex } of batches) {
      const sends = this.sending.get(shardIndex) ?? new Set<Promise<void>>();
      this.sending.set(shardIndex, sends);
      sends.add(sent);
    }
    return sent;
  }

  /**
   * One fenced acknowledgement call for the batches of several shards, each shard's token checked
   * on its own (a refused shard does not refuse the others), and each shard's outcome its own: a
   * shard whose XACK failed is sent again, not the ones that landed beside it. A failure to reach
   * Redis is retried with backoff while the poller runs (a restart or a reset must not leave
   * finished entries pending here for good); after the last attempt they stay pending, and the
   * owner's sweep of its own untracked entries (or the shard's next owner) processes them again.
   */
  private async sendWithRetries(batches: SentBatch[]): Promise<AckOutcome[]> {
    const outcomes: AckOutcome[] = batches.map(() => 'unsent');
    let open = batches.map((_, i) => i);
    for (let attempt = 1; ; attempt++) {
      let results: ShardAck[];
      try {
        // Bounded (SPEC 10.1): on a connection that stopped answering the call would never settle,
        // the entries would stay unacknowledged with no error, and stop() would wait for them.
        results = await withTimeout(this.client.ackMany(open.map((i) => batches[i])), this.connection.callTimeoutMs);
        this.answered();
      } catch (error) {
        if (error instanceof NoAnswerError) this.noAnswer();
        else this.answered();
        results = open.map(() => ({ failed: error as Error }));
      }
      // Asked after the call: a stop() that began while it was out must not wait for another one
      // (its bound counts one call, docs/runtime.md).
      const retry = this.running() && attempt < ACK_ATTEMPTS;
      const failed: number[] = [];
      results.forEach((result, n) => {
        const i = open[n];
        if ('failed' in result) {
          failed.push(i);
          const { shardIndex, ids } = batches[i];
          this.events.emit(
            'error',
            new ShardError(
              `shard ${shardIndex}: acknowledging ${ids.length} entries failed${retry ? ', retrying' : '; they stay pending'}`,
              shardIndex,
              result.failed,
            ),
          );
        } else {
          outcomes[i] = this.landed(batches[i], result);
        }
      });
      if (failed.length === 0 || !retry) return outcomes;
      open = failed;
      await sleep(retryDelayMs(attempt, 50, 2000));
    }
  }

  private answered(): void {
    this.noAnswersInARow = 0;
    this.unanswered = undefined;
  }

  /**
   * An ack call got no answer in time: listed in `problem()` until one is answered; twice in a row
   * on the member's own ack connection, that connection is reset (its socket destroyed: ioredis
   * reconnects and sends the unanswered calls again, each decided by its fencing token).
   */
  private noAnswer(): void {
    this.noAnswersInARow += 1;
    this.unanswered = `acknowledgements got no answer within ${this.connection.callTimeoutMs} ms (${this.noAnswersInARow} call(s) in a row): finished entries stay pending until one is answered`;
    if (this.connection.reset === undefined || this.noAnswersInARow < ACK_NO_ANSWERS_BEFORE_RESET) return;
    this.noAnswersInARow = 0;
    const what = this.connection.reset();
    this.events.emit(
      'error',
      new ShardError(
        `${ACK_NO_ANSWERS_BEFORE_RESET} acknowledgement calls in a row got no answer within ${this.connection.callTimeoutMs} ms; ${what}`,
      ),
    );
  }

  /** A shard's acks came back: accepted, or refused by a newer owner's token (that grant is over). */
  private landed(
    { shardIndex, grantEpoch, ids, state }: SentBatch,
    { acked, notReplicated }: { acked: number; notReplicated?: Error },
  ): AckOutcome {
    const accepted = acked !== -1;
    this.events.emit('acknowledged', { shardIndex, grantEpoch, ids, accepted });
    if (notReplicated) {
      // Not retried: the ack is on the master; only a failover before it replicates undoes it (a redelivery).
      this.events.emit(
        'error',
        new ShardError(
          `shard ${shardIndex}: ${ids.length} acknowledgement(s) ${notReplicated.message}; a failover now would deliver them again`,
          shardIndex,
          notReplicated,
        ),
      );
    }
    if (!accepted) {
      this.events.emit(
        'error',
        new ShardError(
          `shard ${shardIndex}: ${ids.length} acknowledgement(s) refused, the shard has a new owner; it will process them again`,
          shardIndex,
        ),
      );
      this.refused(state);
    }
    return accepted ? 'accepted' : 'refused';
  }

  private track(shardIndex: number, ids: string[]): void {
    let batches = this.unsettled.get(shardIndex);
    if (!batches) {
      batches = new Set();
      this.unsettled.set(shardIndex, batches);
    }
    batches.add(ids);
  }

  private untrack(shardIndex: number, ids: string[]): void {
    const batches = this.unsettled.get(shardIndex);
    if (!batches) return;
    batches.delete(ids);
    if (batches.size === 0) this.unsettled.delete(shardIndex);
  }
}
