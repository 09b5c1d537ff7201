import { NoAnswerError, withTimeout } from '../member/abortable-sleep';
import { checkOption } from '../protocol/option-ranges';
import type { ReplicaWait } from '../redis/connection/replica-wait';
import { isCluster } from '../redis/connection/slot-pipelines';
import type { RedisClient } from '../redis/scripts';
import { CallDeadlines } from './call-deadlines';
import { appendToShards, MAX_ENTRIES_PER_CALL, type ShardAppend, type ShardAppendOutcome } from './entry-writer';
import { shardForKey } from './key-hash';
import type { ProducerRouting } from './producer-routing';
import type { SendUnit } from './send-unit';

/** Calls that may refuse an entry (routed count not in effect, or no marker) before it fails naming shard and counts. */
const MAX_ROUNDS = 4;
/** Recent keys' shards for the count routed with (keys repeat; hashing them is the hot path). */
const ROUTE_CACHE_SIZE = 10_000;
/**
 * How long a call waits for its reply before its entries fail as maybe written (SPEC 10.1), unless
 * the producer sets `appendTimeoutMs`. A call runs in about a quarter of a millisecond; this is well
 * past an ioredis reconnect and resend (its default retry waits at most 2 s; the resent call is
 * answered from the write log) and a Cluster redirection during a slot migration, yet far below
 * TCP giving a silent connection up (minutes), which is how long a hung call waited before.
 */
export const DEFAULT_APPEND_TIMEOUT_MS = 10_000;

/** What keeps an entry in order with its predecessors: its key, else its explicit shard; keyless round-robin entries have no order. */
type OrderKey = string | number;

function orderKeyOf(entry: PendingEntry): OrderKey | undefined {
  return entry.key ?? entry.shardIndex;
}

/** One call sent and not settled (or past its bound, and not answered yet): its shard, the count it was routed with, its entries. */
interface CallInFlight {
  shard: number;
  routedCount: number;
  entries: PendingEntry[];
}

/** One entry from its send until it is written or failed. */
interface PendingEntry {
  /** Submission order across the producer: entries are routed, and routed again, in this order. */
  seq: number;
  unit: SendUnit;
  /** Its position in its unit's messages. */
  index: number;
  fields: (string | Buffer)[];
  /** When it is due: '' now, '+<ms>' after the write's Redis time, '@<epoch ms>' (appendEntries-5.lua). */
  due: string;
  key: string | undefined;
  /** The message's explicit shard, if any. */
  shardIndex: number | undefined;
  /** Calls that refused it so far. */
  refusals: number;
  /** The shard it was routed to last, if any. */
  routedTo: number | undefined;
}

/** A shard's entries routed and not yet sent, and whether a call of it is in flight. */
interface Lane {
  queue: PendingEntry[];
  busy: boolean;
}

/** The keys of one shard, built (and validated) once. */
export interface ShardKeys {
  stream: string;
  routing: string;
  writes: string;
  /** The shard's schedule and its entries' fields (delayed entries wait there). */
  schedule: string;
  scheduledEntries: string;
  wake?: string;
}

export interface SendMergerOptions {
  maxLenApprox: number | undefined;
  replicaWait: ReplicaWait | undefined;
  /** A call's bound for its reply (plus the replica wait's timeout): past it, its entries fail as maybe written. */
  appendTimeoutMs: number;
  streamPrefix: string;
  /** The keys of shard `i`, and this producer's write log on it. */
  shardKeys(shardIndex: number): ShardKeys;
}

/**
 * Merged sends: every entry of every send joins its shard's queue, and each shard has at most one
 * `appendEntries` call in flight; what queued meanwhile goes in the next call when it settles (up to
 * MAX_ENTRIES_PER_CALL), so the routing check, the write log and the Lua call are paid once per call,
 * not per entry. What each caller is promised stays its own (SPEC 9.5):
 * - per-key order: entries are routed in submission order, a shard's calls go one after another, and
 *   no key's entry is routed with a new shard count while a call routed with another count holding
 *   that key may still be refused (its entries go first, routed again, in their order); other keys
 *   go on, so that one shard's slow call holds only its own keys (SPEC 10.8);
 * - every call is bounded (`appendTimeoutMs`, SPEC 10.1): past it, its entries fail as maybe written
 *   (a resend of the call is answered from the write log) and its shard's next call goes;
 * - a failure is the failing entry's and its key's: the script skips the later entries of that key in
 *   the call, and the key's entries still queued here fail with it; other keys' entries go on;
 * - a call resent after a lost reply is answered from the shard's write log (one sequence number per
 *   call, appendEntries-5.lua): nothing is written twice.
 */
export class SendMerger {
  /** Submitted, not yet routed, in submission order. */
  private waiting: PendingEntry[] = [];
  /** Refused by their shard, or taken back from a lane before a count change: to be routed again. */
  private returned: PendingEntry[] = [];
  private lanes = new Map<number, Lane>();
  /** Shards with entries queued. */
  private readonly ready = new Set<number>();
  /** The shard count the lanes' entries were routed with. */
  private laneCount = 0;
  private readonly inFlight = new Set<CallInFlight>();
  /** Calls failed past their bound whose reply has not come yet: they may still land. */
  private readonly unanswered = new Set<CallInFlight>();
  private nextSeq = 0;
  private scheduled = false;
  private draining = false;
  private drainAgain = false;
  /** The count a refusing shard said is in effect, used until the metadata was read again. */
  private refusedWith: number | undefined;
  /** A shard had no routing marker: the markers are ensured before anything is routed again. */
  private markersMissing = false;
  private roundRobin = 0;
  private readonly routes = new Map<string, number>();
  private readonly writeSeqs = new Map<number, number>();
  /** A call's bound for its reply: `appendTimeoutMs`, plus the replica wait's timeout (WAIT runs on the server for up to it). */
  private readonly callTimeoutMs: number;
  /** Every call in flight's bound, on one timer. */
  private readonly deadlines: CallDeadlines;

  constructor(
    private readonly redis: RedisClient,
    private readonly routing: ProducerRouting,
    private readonly options: SendMergerOptions,
  ) {
    this.callTimeoutMs = options.appendTimeoutMs + (options.replicaWait?.timeoutMs ?? 0);
    this.deadlines = new CallDeadlines(this.callTimeoutMs);
  }

  /**
   * Queues a unit's entries (their fields encoded, and due times, in order). With nothing else under
   * way (no call in flight, nothing queued or about to be routed: one send at a time) they are routed
   * and sent at once, without waiting for the tick's end; otherwise from the next tick on, with the
   * sends made meanwhile. Either way they are routed in submission order: whatever comes after them
   * in this tick queues behind them.
   */
  add(unit: SendUnit, fields: (string | Buffer)[][], dues: readonly string[]): void {
    const messages = unit.messages;
    for (let index = 0; index < messages.length; index++) {
      const message = messages[index];
      this.waiting.push({
        seq: this.nextSeq++,
        unit,
        index,
        fields: fields[index],
        due: dues[index],
        key: message.key,
        shardIndex: message.shardIndex,
        refusals: 0,
        routedTo: undefined,
      });
    }
    if (this.idle()) void this.drain();
    else this.schedule();
  }

  /** Nothing in flight, nothing to route but what was just added, no drain running or due. */
  private idle(): boolean {
    return !this.scheduled && !this.draining && this.inFlight.size === 0 && this.returned.length === 0 && this.ready.size === 0;
  }

  /**
   * After the current tick: the sends made in it (and the callers woken by the last replies) join
   * the same calls, like ioredis' auto-pipelining.
   */
  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    process.nextTick(() => {
      this.scheduled = false;
      void this.drain();
    });
  }

  private async drain(): Promise<void> {
    if (this.draining) {
      this.drainAgain = true;
      return;
    }
    this.draining = true;
    try {
      do {
        this.drainAgain = false;
        await this.step();
      } while (this.drainAgain);
    } catch (error) {
      // A defect here must not leave callers waiting for ever: what was not sent fails with it.
      const stranded = this.returned.concat(this.waiting);
      this.returned = [];
      this.waiting = [];
      for (const entry of stranded) entry.unit.fail(entry.index, entry.routedTo, error as Error, false);
    } finally {
      this.draining = false;
    }
  }

  /** Routes what waits (with the count in effect, reading it when due), then sends every idle shard's call. */
  private async step(): Promise<void> {
    const rerouting = this.returned.length > 0;
    if (rerouting) {
      this.waiting = this.returned.concat(this.waiting).sort((a, b) => a.seq - b.seq);
      this.returned = [];
    }
    if (this.waiting.length === 0) return this.flushIdle();
    // The cached count when it is recent (no await on the hot path), else read.
    let count = this.markersMissing ? undefined : (this.refusedWith ?? this.routing.cached());
    if (count === undefined) {
      try {
        count = await this.countToRoute();
      } catch (error) {
        // No routing (the read failed, the stream has no metadata): what waits is not written. A
        // send none of whose entries was routed yet rejects with that error itself.
        for (const entry of this.takeWaiting()) {
          if (!entry.unit.routed) entry.unit.refuse(error);
          else if (!entry.unit.done) this.failEntry(entry, entry.routedTo, error as Error, false);
        }
        return this.flushIdle();
      }
    }
    if (count !== this.laneCount || rerouting) {
      // What was routed and not sent is routed again (with the new count, if it changed) in
      // submission order with the refused entries, which were sent before it.
      const queued: PendingEntry[] = [];
      for (const shard of this.ready) queued.push(...this.lanes.get(shard)!.queue.splice(0));
      this.ready.clear();
      if (queued.length > 0) this.waiting = queued.concat(this.waiting).sort((a, b) => a.seq - b.seq);
      if (count !== this.laneCount) this.routes.clear();
      this.laneCount = count;
    }
    // A key with an entry in a call routed with another count waits for it: refused, that entry is
    // routed again and must go first. Every other key goes on (SPEC 10.8).
    const stale = orderKeysOf(this.inFlight, (call) => call.routedCount !== count, orderKeyOf);
    // A call past its bound may still land (a resend, a redirection after a slot migration): until
    // its answer comes, its keys' later entries, wherever they go, could land before it.
    const unanswered = orderKeysOf(
      this.unanswered,
      () => true,
      (entry) => entry.key,
    );
    const waiting = this.takeWaiting();
    const held: PendingEntry[] = [];
    for (let i = 0; i < waiting.length; i++) {
      const entry = waiting[i];
      const unit = entry.unit;
      if (!unit.rangeChecked && unit.maxShardIndex >= count) {
        // An explicit shard beyond the known count: look again before refusing (this and what follows wait).
        this.waiting = held.concat(waiting.slice(i), this.waiting);
        await this.checkRange(unit);
        this.drainAgain = true;
        return;
      }
      const lateOn = unanswered.size > 0 && entry.key !== undefined ? unanswered.get(entry.key) : undefined;
      if (lateOn !== undefined) {
        // Bounded and visible rather than held until that answer: it fails, not written.
        this.failEntry(entry, undefined, mayStillLand(lateOn), false);
        continue;
      }
      const orderKey = stale.size > 0 ? orderKeyOf(entry) : undefined;
      if (orderKey !== undefined && stale.has(orderKey)) {
        held.push(entry); // its key's later entries are held after it (stale has the key)
        continue;
      }
      unit.rangeChecked = true;
      unit.routed = true;
      this.route(entry, count);
    }
    // Routed again when a call settles (each settlement schedules a drain).
    this.waiting = held.concat(this.waiting);
    this.flushIdle();
  }

  private takeWaiting(): PendingEntry[] {
    const waiting = this.waiting;
    this.waiting = [];
    return waiting;
  }

  /** The count to route with, read when due: bounded like a write (SPEC 10.1), every send waits for it. */
  private async countToRoute(): Promise<number> {
    if (this.markersMissing) {
      this.markersMissing = false;
      this.refusedWith = undefined;
      return this.bounded(this.routing.ensureMarkers(), 'the routing read and marker writes');
    }
    return this.refusedWith ?? this.routing.cached() ?? (await this.bounded(this.routing.current(), 'the routing read'));
  }

  /** `read`, or past `appendTimeoutMs` an error naming it: the sends waiting for it fail, not written. */
  private async bounded<R>(read: Promise<R>, what: string): Promise<R> {
    try {
      return await withTimeout(read, this.options.appendTimeoutMs);
    } catch (error) {
      if (!(error instanceof NoAnswerError)) throw error;
      throw new Error(
        `${what} of stream "${this.options.streamPrefix}" got no answer within ${this.options.appendTimeoutMs} ms: nothing was written`,
      );
    }
  }

  /** A unit with a `shardIndex` beyond the known count: refused as a whole unless the stream has that shard by now. */
  private async checkRange(unit: SendUnit): Promise<void> {
    let error: unknown;
    try {
      const count = await this.bounded(this.routing.covering(unit.maxShardIndex), 'the routing read');
      if (unit.maxShardIndex < count) {
        unit.rangeChecked = true;
        return;
      }
      checkOption('shardIndex', unit.maxShardIndex, { max: count - 1 });
    } catch (thrown) {
      error = thrown;
    }
    this.waiting = this.waiting.filter((entry) => entry.unit !== unit);
    unit.refuse(error);
  }

  private route(entry: PendingEntry, count: number): void {
    if (entry.shardIndex !== undefined && entry.shardIndex >= count) {
      // Only after a re-route: a shrink removed the shard this entry was addressed to.
      const error = new RangeError(`shardIndex ${entry.shardIndex} no longer takes writes: the stream has ${count} shards now`);
      this.failEntry(entry, entry.shardIndex, error, false);
      return;
    }
    const shard = this.shardOf(entry, count);
    entry.routedTo = shard;
    let lane = this.lanes.get(shard);
    if (!lane) {
      lane = { queue: [], busy: false };
      this.lanes.set(shard, lane);
    }
    lane.queue.push(entry);
    this.ready.add(shard);
  }

  private shardOf(entry: PendingEntry, count: number): number {
    if (entry.shardIndex !== undefined) return entry.shardIndex;
    if (entry.key !== undefined) {
      let shard = this.routes.get(entry.key);
      if (shard === undefined) {
        if (this.routes.size >= ROUTE_CACHE_SIZE) this.routes.clear();
        shard = shardForKey(entry.key, count);
        this.routes.set(entry.key, shard);
      }
      return shard;
    }
    this.roundRobin = (this.roundRobin + 1) % count;
    return this.roundRobin;
  }

  /** Sends one call for every shard with entries queued and none in flight: together, one script call when several (appendToShards). */
  private flushIdle(): void {
    // Refused while this step awaited: they go before what was queued after them, routed again first.
    if (this.returned.length > 0) {
      this.drainAgain = true;
      return;
    }
    const calls: { append: ShardAppend; entries: PendingEntry[] }[] = [];
    for (const shard of this.ready) {
      const lane = this.lanes.get(shard)!;
      if (lane.busy) continue;
      const entries = lane.queue.length <= MAX_ENTRIES_PER_CALL ? lane.queue.splice(0) : lane.queue.splice(0, MAX_ENTRIES_PER_CALL);
      if (lane.queue.length === 0) this.ready.delete(shard);
      if (entries.length === 0) continue;
      lane.busy = true;
      calls.push({ append: this.appendOf(shard, entries), entries });
    }
    if (calls.length === 0) return;
    // On a single Redis the calls share one connection and their replies come in order: one
    // script call, settled together. On a Cluster each shard's call settles on its own, so that a slow
    // master holds only its own shards' next calls (SPEC 10.8).
    if (isCluster(this.redis)) for (const call of calls) this.send([call]);
    else this.send(calls);
  }

  private send(calls: { append: ShardAppend; entries: PendingEntry[] }[]): void {
    const routedCount = this.laneCount;
    const inFlight = calls.map((call) => ({ shard: call.append.shardIndex, routedCount, entries: call.entries }));
    for (const call of inFlight) this.inFlight.add(call);
    const timeoutMs = this.callTimeoutMs;
    const appended = appendToShards(
      this.redis,
      routedCount,
      this.options.maxLenApprox,
      calls.map((call) => call.append),
      this.options.replicaWait,
    );
    // Past the bound the call counts as a lost reply (maybe written): ioredis may still resend it,
    // and the write log answers that resend without writing twice; its late reply is ignored here.
    // Until that reply comes, the call may still land: its keys' entries routed to other shards
    // meanwhile fail rather than overtake it (mayStillLand). One bound on the producer's shared
    // timer and one callback per call, not a race of promises: this runs once per call, and one
    // send at a time pays it per send.
    let decided = false;
    const failAll = (error: Error) => calls.map((): ShardAppendOutcome => ({ status: 'failed', error, replied: false }));
    const deadline = this.deadlines.start(() => {
      decided = true;
      for (const call of inFlight) this.unanswered.add(call);
      this.settleCalls(calls, inFlight, failAll(noAnswer(new NoAnswerError(timeoutMs), calls, timeoutMs)), routedCount);
    });
    const answered = (outcomes: ShardAppendOutcome[]) => {
      if (decided) {
        for (const call of inFlight) this.unanswered.delete(call);
        return;
      }
      decided = true;
      this.deadlines.end(deadline);
      this.settleCalls(calls, inFlight, outcomes, routedCount);
    };
    appended.then(answered, (error: unknown) => answered(failAll(error as Error)));
  }

  /** The calls' outcomes, each for its own entries; then what queued meanwhile goes. */
  private settleCalls(
    calls: { append: ShardAppend; entries: PendingEntry[] }[],
    inFlight: CallInFlight[],
    outcomes: ShardAppendOutcome[],
    routedCount: number,
  ): void {
    let settled = 0;
    calls.forEach((call, i) => {
      this.inFlight.delete(inFlight[i]);
      const lane = this.lanes.get(call.append.shardIndex);
      if (lane) lane.busy = false;
      this.settle(call.append.shardIndex, call.entries, outcomes[i], routedCount);
      settled += call.entries.length;
    });
    // What queued meanwhile (or came back refused) goes now. So do the sends of the callers these
    // replies wake, made before the tick ends: together, not the first one alone. Only one entry
    // settled and nothing queued (one send at a time): the next send finds the producer idle and
    // goes at once (add).
    if (settled > 1 || this.returned.length > 0 || this.waiting.length > 0 || this.ready.size > 0) this.schedule();
  }

  private appendOf(shard: number, entries: PendingEntry[]): ShardAppend {
    const writeSeq = (this.writeSeqs.get(shard) ?? 0) + 1;
    this.writeSeqs.set(shard, writeSeq);
    // One order group per key in this call; entries without a key are in none.
    const groupOf = new Map<string, number>();
    const groups = new Array<number>(entries.length);
    const fields = new Array<(string | Buffer)[]>(entries.length);
    const dues = new Array<string>(entries.length);
    for (let i = 0; i < entries.length; i++) {
      const { key } = entries[i];
      fields[i] = entries[i].fields;
      dues[i] = entries[i].due;
      if (key === undefined) groups[i] = 0;
      else {
        let group = groupOf.get(key);
        if (group === undefined) groupOf.set(key, (group = groupOf.size + 1));
        groups[i] = group;
      }
    }
    return { shardIndex: shard, ...this.options.shardKeys(shard), writeSeq, entries: fields, dues, groups };
  }

  /** What a call's outcome means for each of its entries. */
  private settle(shard: number, entries: PendingEntry[], outcome: ShardAppendOutcome, routedCount: number): void {
    switch (outcome.status) {
      case 'applied':
        entries.forEach((entry, i) => {
          const result = outcome.results[i];
          if (result === undefined) this.failEntry(entry, shard, notAttempted(shard), false);
          else if (result instanceof Error) this.failEntry(entry, shard, result, false);
          // On the master, not confirmed on replicas: the caller decides (a retry may write it twice).
          else if (outcome.notReplicated) entry.unit.fail(entry.index, shard, outcome.notReplicated, true, result.id);
          else entry.unit.wrote(entry.index, shard, result);
        });
        return;
      case 'failed':
        // Redis said no (nothing written), or the reply never came (the entries may be in the stream).
        for (const entry of entries) this.failEntry(entry, shard, outcome.error, !outcome.replied);
        return;
      case 'reroute':
        // Route with the count the shard named until the metadata, read again now, says the same.
        if (this.refusedWith !== outcome.shardCountInEffect) {
          this.refusedWith = outcome.shardCountInEffect;
          void this.routing.reread().then(
            () => {
              this.refusedWith = undefined;
            },
            () => undefined,
          );
        }
        this.refused(
          entries,
          shard,
          () =>
            `shard ${shard} kept refusing writes routed with ${routedCount} shards (in effect: ${outcome.shardCountInEffect}) after ${MAX_ROUNDS} attempts`,
        );
        return;
      case 'unrouted':
        // A shard without a routing marker cannot check the count: Redis lost its keys (the cached
        // count may predate the loss) or the stream predates markers. The metadata decides (read
        // after the refusal), and the markers are ensured from it.
        this.markersMissing = true;
        this.refused(
          entries,
          shard,
          () =>
            `shard ${shard} of stream "${this.options.streamPrefix}" still had no routing marker after ${MAX_ROUNDS} attempts (are its keys being deleted?)`,
        );
        return;
    }
  }

  /** Nothing of the call was written: its entries are routed again, in order, unless refused too often. */
  private refused(entries: PendingEntry[], shard: number, tooOften: () => string): void {
    for (const entry of entries) {
      entry.refusals += 1;
      if (entry.refusals < MAX_ROUNDS) this.returned.push(entry);
      else this.failEntry(entry, shard, new Error(tooOften()), false);
    }
  }

  /**
   * The entry fails; so do its key's entries queued behind it (submitted before its failure was
   * known), so that none of them lands after it did not: a retry in order keeps the key's order.
   */
  private failEntry(entry: PendingEntry, shard: number | undefined, error: Error, maybeWritten: boolean): void {
    entry.unit.fail(entry.index, shard, error, maybeWritten);
    const key = entry.key;
    if (key === undefined) return;
    const follows = (other: PendingEntry) => other.key === key;
    const lane = shard === undefined ? undefined : this.lanes.get(shard);
    const without = (queue: PendingEntry[]) =>
      queue.some(follows)
        ? queue.filter((other) => {
            if (!follows(other)) return true;
            other.unit.fail(other.index, other.routedTo, notAttempted(other.routedTo), false);
            return false;
          })
        : queue;
    if (lane) lane.queue = without(lane.queue);
    this.returned = without(this.returned);
    this.waiting = without(this.waiting);
  }
}

/** The error of a call past its bound: which shards, and that its entries may be in the stream. */
function noAnswer(error: Error, calls: { append: ShardAppend }[], timeoutMs: number): Error {
  if (!(error instanceof NoAnswerError)) return error;
  const shards = calls.map((call) => call.append.shardIndex).join(', ');
  return new Error(
    `appendEntries on shard${calls.length > 1 ? 's' : ''} ${shards} got no answer within ${timeoutMs} ms: its entries may or may not be in the stream (a resend of the call is answered from the write log, never written twice)`,
  );
}

const NO_ORDER_KEYS: ReadonlyMap<OrderKey, number> = new Map();

/** The order keys (by `keyOf`) of the entries of the `calls` that `which` picks, each with its call's shard. Empty on the hot path. */
function orderKeysOf(
  calls: Set<CallInFlight>,
  which: (call: CallInFlight) => boolean,
  keyOf: (entry: PendingEntry) => OrderKey | undefined,
): ReadonlyMap<OrderKey, number> {
  if (calls.size === 0) return NO_ORDER_KEYS;
  const keys = new Map<OrderKey, number>();
  for (const call of calls) {
    if (!which(call)) continue;
    for (const entry of call.entries) {
      const orderKey = keyOf(entry);
      if (orderKey !== undefined) keys.set(orderKey, call.shard);
    }
  }
  return keys;
}

function mayStillLand(shard: number): Error {
  return new Error(
    `not written: an earlier entry of its key got no answer from shard ${shard} and may still land there; until that answer comes, its key's writes fail so that none overtakes it`,
  );
}

function notAttempted(shard: number | undefined): Error {
  return new Error(
    `not written: an earlier entry of its key failed${shard === undefined ? '' : ` (shard ${shard})`}, and a key's writes stop there so that a retry keeps its order`,
  );
}
