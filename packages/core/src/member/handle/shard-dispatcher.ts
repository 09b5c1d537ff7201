import type { EventEmitter } from 'node:events';
import { routingKeyOf } from '../../protocol/entry-format';
import type { ShardClient } from '../../redis/shard-client';
import type { ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, QueuedEntry, ShardSet, ShardState, Work } from '../shard-state';
import type { AckBatcher } from './ack-batcher';
import { AttemptSequence } from './attempt-sequence';
import { HandlerStallWatch } from './handler-stall-watch';
import type { Workers } from './workers';

/** A settled promise, the `done` of work that has not got its own yet. */
const RESOLVED: Promise<void> = Promise.resolve();

/** The lane of entries without a routing key (they keep their order among themselves); keys get a prefix so none equals it. */
const NO_KEY_LANE = '';

/**
 * How often work waiting for a worker looks again whether handlers may start, while they may not
 * (an unsafe lease, a cutover read behind): not every way back to "may start" tells the dispatcher.
 */
const MAY_START_RECHECK_MS = 50;

/**
 * Stalled calls that may run without a worker, per worker (`runtimeMaxConcurrency`). A stalled call
 * gives its worker back so that one hung handler does not stop the other shards (SPEC 10.8); but
 * every such call still runs, so without a cap hung calls would pile up without bound. With one per
 * worker, handler calls running at once never exceed twice `runtimeMaxConcurrency` (SPEC 10.7);
 * past the cap a stalled call keeps its worker (reported so) until a stalled call ends.
 */
const STALLED_CALLS_PER_WORKER = 1;

/** The next thing a free worker does: start `count` queued entries of `state` from `start` on lane `lane`, or resume `work`. */
type Pick = { state: ShardState; start: number; count: number; lane: string; work?: undefined } | { state: ShardState; work: Work };

/**
 * Decides which work gets one of the member's `runtimeMaxConcurrency` workers, and in what order;
 * what to do with it is the AttemptSequence's. It promises:
 * - per shard one entry at a time (with `lanes`, one per routing key on up to `lanes` lanes; with
 *   `batch`, one batch): an entry's lane is held until it is acknowledged, dead-lettered or its
 *   shard released, whatever fails meanwhile, so no later entry of the shard (of the key) starts
 *   before it (SPEC 5 per-shard and per-key order);
 * - at most `runtimeMaxConcurrency` handler calls hold a worker; work waiting out a backoff, a
 *   dead-letter write, a pause or an unsafe lease holds none, and a call past `handlerStallMs` gives
 *   its worker back, reported (SPEC 10.8: one shard's trouble stays in that shard), unless
 *   `runtimeMaxConcurrency` calls already run stalled: then it keeps it, so at most twice
 *   `runtimeMaxConcurrency` handler calls run at once whatever hangs (SPEC 10.7);
 * - shards are served round-robin from the one after the last served, a shard's resumed work
 *   before its queue, so that no shard starves (SPEC 5 "up to its worker capacity across shards");
 * - nothing starts while handlers may not (lease unsafe, paused), on a shard being swept, or on a
 *   shard whose earlier grant's handler still runs (SPEC 5: never two at once in one process).
 */
export class ShardDispatcher implements Workers {
  private cursor = -1;
  /** Workers held now: handler calls running within their stall bound. */
  private running = 0;
  /** Calls past `handlerStallMs` that still run and hold no worker: at most STALLED_CALLS_PER_WORKER per worker. */
  private stalled = 0;
  /** Calls past `handlerStallMs` that keep their worker (the stalled ones were at their cap), oldest first. */
  private readonly stalledHolding = new Map<Work, ShardState>();
  /** Work started and not over (running, waiting out a backoff or a dead-letter write, stalled). */
  private inFlight = 0;
  /** True while dispatch() runs: a release from inside it (a synchronous failure) lets its loop go on instead of nesting. */
  private dispatching = false;
  private readonly attempts: AttemptSequence;
  private readonly stalls: HandlerStallWatch;
  /** A dispatch due when a short batch has waited `batch.maxWaitMs`. */
  private batchTimer: { at: number; timer: NodeJS.Timeout } | undefined;
  /** A dispatch due to look again whether handlers may start, for work waiting to resume. */
  private recheckTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly shards: ShardSet,
    client: ShardClient,
    acks: AckBatcher,
    events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
    /** False while the member's lease may be lost, or while it is paused: no handler may start then. */
    private readonly mayStartHandlers: () => boolean,
    /** A shard ran out of work (the reader may need to read it sooner). */
    private readonly onDrained: (state: ShardState) => void,
  ) {
    this.attempts = new AttemptSequence(shards, client, acks, events, options, this);
    this.stalls = new HandlerStallWatch(options, events, (state, work) => {
      if (this.stalled >= this.stalledCap()) {
        this.stalledHolding.set(work, state);
        return false;
      }
      this.giveBackStalled(work);
      this.dispatch();
      return true;
    });
  }

  /** Handler calls running now, stalled ones included; work waiting out a backoff is not counted. */
  get activeHandlers(): number {
    return this.running + this.stalled;
  }

  /** `onDeadLetter` calls that threw or rejected (`stats().deadLetterHookFailures`). */
  get hookFailures(): number {
    return this.attempts.hookFailures;
  }

  /** ackMode 'manual': acks and nacks refused (`stats().refusedAcks`). */
  get refusedAcks(): number {
    return this.attempts.refusedAcks;
  }

  dispatch(): void {
    if (this.dispatching) return;
    this.dispatching = true;
    try {
      while (this.running < this.options.runtimeMaxConcurrency && this.mayStartHandlers()) {
        const pick = this.nextWork();
        if (!pick) return;
        if (pick.work) this.resumeWith(pick.state, pick.work);
        else this.start(pick.state, pick.start, pick.count, pick.lane);
      }
      if (!this.mayStartHandlers()) this.recheckWhileResuming();
    } finally {
      this.dispatching = false;
    }
  }

  // ---- Workers: what the attempt sequence gives back and asks for -------------------------------

  release(state: ShardState, work: Work): void {
    if (this.callEnded(state, work)) this.dispatch();
  }

  acquire(state: ShardState, work: Work): Promise<boolean> {
    if (state.released.signal.aborted) return Promise.resolve(false);
    if (work.worker && this.mayStartHandlers()) return Promise.resolve(true);
    this.release(state, work);
    const signal = state.released.signal;
    const granted = new Promise<boolean>((resolve) => {
      const onReleased = () => {
        const at = state.resuming.indexOf(work);
        if (at >= 0) state.resuming.splice(at, 1);
        work.resume = undefined;
        resolve(false);
      };
      signal.addEventListener('abort', onReleased, { once: true });
      work.resume = (ok) => {
        signal.removeEventListener('abort', onReleased);
        work.resume = undefined;
        resolve(ok);
      };
      state.resuming.push(work);
    });
    this.dispatch();
    // Granted in dispatch(), run a microtask later: the shard may have been released in between.
    return granted.then((ok) => ok && !signal.aborted);
  }

  // ---- scheduling --------------------------------------------------------------------------------

  /** Round-robin from the shard after the last one served: every owned shard keeps making progress. */
  private nextWork(): Pick | undefined {
    const order = this.shards.order;
    const n = order.length;
    const now = Date.now();
    for (let step = 1; step <= n; step++) {
      const position = (this.cursor + step) % n;
      const state = this.shards.get(order[position]);
      if (!state || state.phase === 'released') continue;
      // Work already started on the shard goes first: it is older than anything queued, and its lane is its own.
      const resumed = state.resuming.shift();
      if (resumed) {
        this.cursor = position;
        return { state, work: resumed };
      }
      if (state.queue.length === 0 || state.work.size >= this.options.lanes || state.sweeping || this.shards.lingering.has(state.index))
        continue;
      const pick = this.pickIn(state, now);
      if (pick) {
        this.cursor = position;
        return pick;
      }
    }
    return undefined;
  }

  /** What may start on a shard with a free lane: the queue's first entry of a key not in flight, or a batch. */
  private pickIn(state: ShardState, now: number): Pick | undefined {
    const batch = this.options.batch;
    if (batch) {
      const count = Math.min(state.queue.length, batch.maxSize);
      if (count < batch.maxSize && batch.maxWaitMs > 0 && this.mayFill(count)) {
        state.batchWaitFrom ??= now;
        const due = state.batchWaitFrom + batch.maxWaitMs;
        if (now < due) {
          this.dispatchAt(due);
          return undefined;
        }
      }
      state.batchWaitFrom = undefined;
      return { state, start: 0, count, lane: NO_KEY_LANE };
    }
    if (this.options.lanes === 1) return { state, start: 0, count: 1, lane: NO_KEY_LANE };
    const queue = state.queue;
    for (let i = 0; i < queue.length; i++) {
      const lane = laneOf(queue[i]);
      if (!state.work.has(lane)) return { state, start: i, count: 1, lane };
    }
    return undefined;
  }

  /**
   * Whether a short batch of `count` entries can still fill by waiting: the buffer has room to read
   * the rest, or work in flight will make some when it settles. Otherwise every place of the buffer
   * (`maxBufferedEntries`, or the member's room in the hub's budget) is taken by batches waiting to fill (4 shards with batches of 10 sharing
   * 20 places: 5 each), nothing can be read, and waiting would only hold them all for maxWaitMs.
   */
  private mayFill(count: number): boolean {
    // The room a read under way holds counts: it is what that read may bring to fill the batch.
    const room = this.shards.bufferSize(this.options.maxBufferedEntries) - this.shards.buffered;
    return this.inFlight > 0 || room >= this.options.batch!.maxSize - count;
  }

  /** Dispatches again at `at` (a short batch's wait ends), unless a dispatch is due sooner anyway. */
  private dispatchAt(at: number): void {
    if (this.batchTimer && this.batchTimer.at <= at) return;
    if (this.batchTimer) clearTimeout(this.batchTimer.timer);
    const timer = setTimeout(
      () => {
        this.batchTimer = undefined;
        this.dispatch();
      },
      Math.max(0, at - Date.now()),
    );
    timer.unref();
    this.batchTimer = { at, timer };
  }

  /** Handlers may not start now: if work waits to resume, look again soon (one timer for the member). */
  private recheckWhileResuming(): void {
    if (this.recheckTimer || !this.shards.all().some((s) => s.resuming.length > 0)) return;
    this.recheckTimer = setTimeout(() => {
      this.recheckTimer = undefined;
      this.dispatch();
    }, MAY_START_RECHECK_MS);
    this.recheckTimer.unref();
  }

  // ---- a worker's life -----------------------------------------------------------------------------

  /** Gives a free worker to work whose wait is over; it runs its next call a microtask later. */
  private resumeWith(state: ShardState, work: Work): void {
    work.worker = true;
    this.running += 1;
    this.stalls.follow(state, work);
    work.resume?.(true);
  }

  /** Starts new work on a free worker: its entries leave the queue and take their lane. */
  private start(state: ShardState, start: number, count: number, lane: string): void {
    // Counted before the handler runs: the loop's bound must see it whatever the handler does (a
    // synchronous handler may call resume() or setRuntimeMaxConcurrency(); that dispatch, from
    // inside this one, returns at once and this loop goes on).
    this.running += 1;
    this.inFlight += 1;
    this.shards.count(-count);
    let pending: Promise<void> | undefined;
    let work: Work;
    if (this.options.batch) {
      const taken = state.queue.splice(start, count);
      work = newWork(taken.map((q) => q.entry.id));
      state.work.set(lane, work);
      pending = this.attempts.runBatch(state, work, taken);
    } else {
      // One entry (the common case, once per entry): no arrays beyond the work's own id list.
      const queued = start === 0 ? state.queue.shift()! : state.queue.splice(start, 1)[0];
      work = newWork([queued.entry.id]);
      state.work.set(lane, work);
      pending = this.attempts.runEntry(state, work, queued);
    }
    if (pending === undefined) {
      // A synchronous handler finished: no promise, no microtask, on to the next entry.
      this.finish(state, lane, work);
      return;
    }
    if (work.worker) this.stalls.follow(state, work);
    const settle = () => {
      this.finish(state, lane, work);
      this.shards.settled(state);
      this.dispatch();
    };
    // Not .finally(): it makes two more promises per entry when it runs, and this runs for every
    // entry whose handler is asynchronous. A rejection still rejects `done`, as finally() passes it on.
    work.done = pending.then(settle, (error: unknown) => {
      settle();
      throw error;
    });
  }

  /** The work's call is over (it ended, or the work waits now): true if that freed a worker. */
  private callEnded(state: ShardState, work: Work): boolean {
    let freed = false;
    if (work.stalled) {
      if (!this.stalledHolding.delete(work) && !work.worker) {
        this.stalled -= 1;
        // A place among the calls that run stalled without a worker: the oldest holding one takes it.
        freed = this.releaseHoldingStall();
      }
    }
    // Work never followed (a synchronous handler, the common case) costs the watch nothing.
    if (work.since !== 0) this.stalls.ended(state, work);
    if (!work.worker) return freed;
    work.worker = false;
    this.running -= 1;
    return true;
  }

  /** The most calls that may run stalled without a worker now. */
  private stalledCap(): number {
    return this.options.runtimeMaxConcurrency * STALLED_CALLS_PER_WORKER;
  }

  /** Stalled `work` gives its worker to other work. */
  private giveBackStalled(work: Work): void {
    work.worker = false;
    this.running -= 1;
    this.stalled += 1;
  }

  /** If a stalled call keeps its worker and there is room, it gives it back (its problems line says so now): true if it did. */
  private releaseHoldingStall(): boolean {
    if (this.stalled >= this.stalledCap()) return false;
    const oldest = this.stalledHolding.entries().next();
    if (oldest.done) return false;
    const [work, state] = oldest.value;
    this.stalledHolding.delete(work);
    this.giveBackStalled(work);
    this.stalls.report(state, work, true);
    return true;
  }

  /** The work is over: its worker (if it still holds one) and its lane are free. */
  private finish(state: ShardState, lane: string, work: Work): void {
    this.callEnded(state, work);
    this.inFlight -= 1;
    state.work.delete(lane);
    if (state.queue.length === 0) this.onDrained(state);
  }
}

/** Work that holds a worker from its start. */
function newWork(ids: string[]): Work {
  return { ids, done: RESOLVED, call: undefined, worker: true, stalled: false, since: 0, resume: undefined };
}

/** The lane key of a queued entry: its routing key (entries without one share a lane). */
function laneOf(queued: QueuedEntry): string {
  if (queued.lane === undefined) {
    const key = routingKeyOf(queued.entry.fields);
    queued.lane = key === undefined ? NO_KEY_LANE : `k${key}`;
  }
  return queued.lane;
}
