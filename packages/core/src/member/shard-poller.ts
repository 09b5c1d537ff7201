import { EventEmitter } from 'node:events';
import type { ShardClient } from '../redis/shard-client';
import { settlesWithin } from './abortable-sleep';
import { ACK_LINGER_MS, AckBatcher, type AckConnectionWatch } from './handle/ack-batcher';
import type { ResolvedMemberOptions } from './member-options';
import type { MemberStats } from './member-stats';
import { ShardDispatcher } from './handle/shard-dispatcher';
import { type ReadTransport, ShardReader } from './read/shard-reader';
import type { ResizeStep } from './read/schedule-givers';
import { sweepPhaseMs } from './read/shard-recovery';
import { type HandlerAbortReason, ShardError } from './consumption-errors';
import { abortCalls, inFlightIds, type PollerEvents, ShardSet, type ShardState, workInFlight } from './shard-state';

/**
 * Releasing a shard waits this long at least for its outstanding acks (even with no time left for
 * its handler): reporting the revocation first would let the next owner run them again.
 */
const MIN_ACK_SETTLE_MS = 1000;

/**
 * The polling adapter of one member (SPEC sections 4 and 5), as the member sees it: shards come and
 * go, holds are set, problems are reported. The work is done by three parts sharing one `ShardSet`:
 * the reader (claims, takeovers, reads, sweeps), the dispatcher (handlers, retries, dead letters)
 * and the ack batcher (fenced acknowledgements).
 */
export class ShardPoller extends EventEmitter<PollerEvents> {
  private readonly shards = new ShardSet((state) => this.emit('shard-lost', { shardIndex: state.index, grantEpoch: state.grantEpoch }));
  private readonly acks: AckBatcher;
  private readonly dispatcher: ShardDispatcher;
  private readonly reader: ShardReader;
  private running = false;
  /** Paused: shards are claimed (fencing tokens installed) but nothing is fetched and no handler starts. */
  private paused = false;

  constructor(
    private readonly client: ShardClient,
    transport: ReadTransport,
    private readonly options: ResolvedMemberOptions,
    /** False while the member's lease may be lost: no handler may start then. */
    mayStartHandlers: () => boolean,
    /** The bound of each ack call, and how to reset the acknowledgements' own connection. */
    ackConnection?: AckConnectionWatch,
  ) {
    super();
    // A refused ack ends the grant at once, as any fenced call does: reads are not fenced, and the
    // member would go on reading and running the shard beside its new owner until a heartbeat said so.
    this.acks = new AckBatcher(
      client,
      this,
      () => this.running,
      (state) => {
        if (!this.shards.isCurrent(state)) return; // an earlier grant's late ack: that grant is over already
        this.shards.lose(state, `shard ${state.index} has a newer owner (its fencing token refused an acknowledgement)`);
        this.reader.interruptRead();
      },
      ACK_LINGER_MS,
      ackConnection,
    );
    const mayStart = () => !this.paused && mayStartHandlers();
    this.dispatcher = new ShardDispatcher(this.shards, client, this.acks, this, options, mayStart, (state) => this.reader.onDrained(state));
    this.reader = new ShardReader(
      this.shards,
      client,
      transport,
      this.acks,
      this,
      options,
      mayStart,
      () => this.paused,
      () => this.dispatcher.dispatch(),
    );
  }

  /** Handler calls running now (stalled ones included; work waiting out a backoff is not counted). */
  get activeHandlers(): number {
    return this.dispatcher.activeHandlers;
  }

  /** `deadLetter.onDeadLetter` calls that threw or rejected since the member was made. */
  get deadLetterHookFailures(): number {
    return this.dispatcher.hookFailures;
  }

  /** ackMode 'manual': acks and nacks refused since the member was made. */
  get refusedAcks(): number {
    return this.dispatcher.refusedAcks;
  }

  get bufferedEntries(): number {
    return this.shards.buffered;
  }

  /** The hub's buffer budget, as `stats().clientBuffer` shows it. */
  get clientBuffer(): MemberStats['clientBuffer'] {
    return this.reader.clientBuffer();
  }

  ownedShards(): number[] {
    return [...this.shards.order];
  }

  get isPaused(): boolean {
    return this.paused;
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.options.telemetry?.attach({
      ownedShards: () => this.ownedShards(),
      groupPositions: (shards) => this.client.groupPositions(shards),
      events: this,
      reportError: (error) => this.emit('error', error),
    });
    this.reader.start();
  }

  /**
   * Stops fetching (no read, takeover or sweep) and starting handlers, retries included; handlers
   * in flight finish and are acknowledged, entries already read stay queued in order. Granted shards
   * are still claimed, and released when revoked, as usual.
   */
  pause(): void {
    if (this.paused) return;
    this.paused = true;
    // A blocking read under way would still deliver entries: cut it short.
    this.reader.interruptRead();
  }

  resume(): void {
    if (!this.paused) return;
    this.paused = false;
    this.dispatcher.dispatch();
    this.reader.interruptRead();
  }

  /** Handlers may start again (the lease is safe again): start what is queued, and read on. */
  handlersMayStart(): void {
    this.dispatcher.dispatch();
    this.reader.wakeup.notify();
  }

  /** `runtimeMaxConcurrency` changed: start what the new capacity allows (a lower one lets in-flight calls finish). */
  capacityChanged(): void {
    this.dispatcher.dispatch();
  }

  /** A shard granted at `grantEpoch`: claim its token, take over its pending entries, then read it. */
  addShard(shardIndex: number, grantEpoch: number): void {
    const existing = this.shards.get(shardIndex);
    if (existing && existing.phase !== 'released') return;
    // Its sweeps run in its phase of the interval, not with every shard gained at the same time.
    this.shards.add(shardIndex, grantEpoch).lastSweepAt -= sweepPhaseMs(shardIndex, this.options.sweepIntervalMs);
    this.reader.interruptRead();
  }

  /**
   * Entries of the given shards from `fromId` on are read but not handled until the holds are
   * replaced; a shard stops being read once it has held entries. An empty map releases every hold.
   */
  /** The stream's resize history (ScheduleGivers: whose schedules bound each shard's releases). */
  setResizeHistory(history: readonly ResizeStep[], shardCount: number, metadataVersion: number): void {
    this.shards.resizeHistory = { history, shardCount, metadataVersion };
  }

  setHolds(holds: Map<number, string>): void {
    this.shards.setHolds(holds);
    this.dispatcher.dispatch();
    this.reader.interruptRead();
  }

  /**
   * Shard-level conditions that stop work and need someone's attention (see CoordinatedMember.stats):
   * a claim refused by a newer token or failing, a takeover failing, a dead letter that cannot be
   * written, a handler call past `handlerStallMs`. One line each, until the condition clears or the
   * shard is released.
   */
  problems(): string[] {
    const lines = this.shards.all().flatMap((state) => [...state.problems.values()]);
    const acks = this.acks.problem();
    if (acks !== undefined) lines.push(acks);
    // A new grant that waits for an earlier grant's handler (it cannot be stopped) says so: with
    // handlerTimeoutMs 0 a handler that never settles would leave the shard owned and idle.
    for (const [shardIndex, old] of this.shards.lingering) {
      if (this.shards.get(shardIndex))
        lines.push(
          `shard ${shardIndex}: waiting for the handler of ${inFlightIds(old)[0] ?? 'an entry'} from an earlier grant (epoch ${old.grantEpoch}) before handling anything`,
        );
    }
    return lines;
  }

  /** Entries waiting for a hold to be released. */
  get heldEntries(): number {
    let count = 0;
    for (const state of this.shards.all()) count += state.held.length;
    return count;
  }

  /**
   * Stops reading a shard and waits, at most `waitForHandlerMs`, for its in-flight handler; then
   * for every outstanding ack of the shard (earlier batches still retrying too), at least
   * `MIN_ACK_SETTLE_MS` but never past 80 % of `rebalanceTimeoutMs`. Entries read but not started stay pending for the next owner.
   */
  async releaseShard(shardIndex: number, waitForHandlerMs: number, reason: HandlerAbortReason = 'revoked'): Promise<void> {
    const state = this.shards.get(shardIndex);
    if (!state) return;
    const startedAt = Date.now();
    const deadline = startedAt + waitForHandlerMs;
    // The revocation must be reported within rebalanceTimeoutMs or the member is removed: the extra
    // wait for acknowledgements never runs past 80 % of it, whatever revocationTimeoutMs says.
    const latest = Math.max(deadline, startedAt + Math.floor(this.options.rebalanceTimeoutMs * 0.8));
    this.shards.release(state);
    await this.reader.endReadOf(shardIndex);
    const inFlight = workInFlight(state);
    if (inFlight) {
      const finished = await settlesWithin(inFlight, Math.max(0, deadline - Date.now()));
      if (!finished) {
        // The call is told (its signal fires) before the shard is reported free; if it ignores the
        // signal it runs on, but its acknowledgement is refused by the next owner's fencing token,
        // and the next owner runs the entry again (at-least-once).
        this.abortCall(
          state,
          reason,
          `shard ${shardIndex} was released ${waitForHandlerMs} ms after it was ${reason === 'revoked' ? 'revoked' : 'lost'}`,
        );
        this.emit(
          'error',
          new ShardError(
            `shard ${shardIndex}: its handler still runs ${waitForHandlerMs} ms after the shard was revoked; released anyway, the next owner runs that entry again`,
            shardIndex,
          ),
        );
      }
    }
    const now = Date.now();
    const settled = await this.acks.settled(shardIndex, Math.max(0, Math.min(Math.max(MIN_ACK_SETTLE_MS, deadline - now), latest - now)));
    if (!settled) {
      this.emit(
        'error',
        new ShardError(
          `shard ${shardIndex}: acknowledgements still unsettled when it was released; its next owner may process them again`,
          shardIndex,
        ),
      );
    }
  }

  /**
   * Drops every shard at once (lease lost, fenced, aborted): nothing new starts, the calls in flight
   * are told (their signals fire: their shards may be someone else's already); their acks may be refused.
   */
  dropAll(reason: HandlerAbortReason = 'shard-lost'): void {
    for (const state of this.shards.all()) {
      this.shards.release(state);
      this.abortCall(state, reason, `shard ${state.index} was dropped (${reason})`);
    }
    this.reader.interruptRead();
  }

  private abortCall(state: ShardState, reason: HandlerAbortReason, message: string): void {
    abortCalls(state, reason, message);
  }

  /** Stops reading, waits (bounded) for in-flight handlers, flushes acknowledgements. */
  async stop(timeoutMs: number): Promise<void> {
    const states = this.shards.all();
    const inFlight = states.map(workInFlight).filter((p): p is Promise<unknown> => p !== null);
    // Released first, so that no handler starts while the in-flight ones finish: an entry started
    // now would still be running when the member leaves, and its next owner would run it again.
    for (const state of states) this.shards.release(state);
    const reading = this.reader.stop();
    const finished = await settlesWithin(Promise.all(inFlight), timeoutMs);
    if (!finished) {
      for (const state of states) this.abortCall(state, 'stopped', `the member stopped waiting for its handlers after ${timeoutMs} ms`);
    }
    await reading;
    // Sent once more, not retried: the member is leaving, and the next owner redoes what is left.
    this.running = false;
    await this.acks.flush();
    this.options.telemetry?.detach();
  }

  async flushAcks(): Promise<void> {
    await this.acks.flush();
  }
}
