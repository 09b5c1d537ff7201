import { assertIntegerInRange } from '../protocol/names';
import type { ReplicaWait } from '../redis/connection/replica-wait';
import { isCluster } from '../redis/connection/slot-pipelines';
import type { RedisClient } from '../redis/scripts';
import { appendToShards, MAX_ENTRIES_PER_CALL, type ShardAppend, type ShardAppendOutcome } from './entry-writer';
import { shardForKey } from './key-hash';
import type { ProducerRouting } from './producer-routing';
import type { SendUnit } from './send-unit';

/** Calls that may refuse an entry (routed count not in effect, or no marker) before it fails naming shard and counts. */
const MAX_ROUNDS = 4;
/** Recent keys' shards for the count routed with (keys repeat; hashing them is the hot path). */
const ROUTE_CACHE_SIZE = 10_000;

/** One entry from its send until it is written or failed. */
interface PendingEntry {
  /** Submission order across the producer: entries are routed, and routed again, in this order. */
  seq: number;
  unit: SendUnit;
  /** Its position in its unit's messages. */
  index: number;
  fields: (string | Buffer)[];
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
  wake?: string;
}

export interface SendMergerOptions {
  maxLenApprox: number | undefined;
  replicaWait: ReplicaWait | undefined;
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
 *   nothing routed with a new shard count is sent while a call routed with the old one may still be
 *   refused (its entries go first, routed again, in their order);
 * - a failure is the failing entry's and its key's: the script skips the later entries of that key in
 *   the call, and the key's entries still queued here fail with it; other keys' entries go on;
 * - a call resent after a lost reply is answered from the shard's write log (one sequence number per
 *   call, appendEntries-3.lua): nothing is written twice.
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
  private inFlight = 0;
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

  constructor(
    private readonly redis: RedisClient,
    private readonly routing: ProducerRouting,
    private readonly options: SendMergerOptions,
  ) {}

  /** Queues a unit's entries (their fields encoded, in order); they are written from the next tick on. */
  add(unit: SendUnit, fields: (string | Buffer)[][]): void {
    unit.messages.forEach((message, index) => {
      this.waiting.push({
        seq: this.nextSeq++,
        unit,
        index,
        fields: fields[index],
        key: message.key,
        shardIndex: message.shardIndex,
        refusals: 0,
        routedTo: undefined,
      });
    });
    this.schedule();
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
    if (this.returned.length > 0 && this.inFlight > 0) return; // routed again once every call routed like them settled
    if (this.returned.length > 0) {
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
    if (count !== this.laneCount) {
      // What was routed with the old count and not sent goes back, to be routed with the new one
      // after every call routed with the old count settled, so that no key's later entry overtakes.
      for (const shard of this.ready) this.returned = this.returned.concat(this.lanes.get(shard)!.queue.splice(0));
      this.ready.clear();
      if (this.inFlight > 0 || this.returned.length > 0) {
        this.drainAgain = this.inFlight === 0;
        return;
      }
      this.laneCount = count;
      this.lanes = new Map();
      this.routes.clear();
    }
    const waiting = this.takeWaiting();
    for (let i = 0; i < waiting.length; i++) {
      const entry = waiting[i];
      const unit = entry.unit;
      if (!unit.rangeChecked && unit.maxShardIndex >= count) {
        // An explicit shard beyond the known count: look again before refusing (this and what follows wait).
        this.waiting = waiting.slice(i).concat(this.waiting);
        await this.checkRange(unit);
        this.drainAgain = true;
        return;
      }
      unit.rangeChecked = true;
      unit.routed = true;
      this.route(entry, count);
    }
    this.flushIdle();
  }

  private takeWaiting(): PendingEntry[] {
    const waiting = this.waiting;
    this.waiting = [];
    return waiting;
  }

  private async countToRoute(): Promise<number> {
    if (this.markersMissing) {
      this.markersMissing = false;
      this.refusedWith = undefined;
      return this.routing.ensureMarkers();
    }
    return this.refusedWith ?? this.routing.cached() ?? (await this.routing.current());
  }

  /** A unit with a `shardIndex` beyond the known count: refused as a whole unless the stream has that shard by now. */
  private async checkRange(unit: SendUnit): Promise<void> {
    let error: unknown;
    try {
      const count = await this.routing.covering(unit.maxShardIndex);
      if (unit.maxShardIndex < count) {
        unit.rangeChecked = true;
        return;
      }
      assertIntegerInRange('shardIndex', unit.maxShardIndex, 0, count - 1);
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

  /** Sends one call for every shard with entries queued and none in flight: together, one pipeline when several. */
  private flushIdle(): void {
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
    this.inFlight += calls.length;
    // On a single Redis the calls share one connection and their replies come in order: one
    // pipeline, settled together. On a Cluster each shard's call settles on its own, so that a slow
    // master holds only its own shards' next calls (SPEC 10.8).
    if (isCluster(this.redis)) for (const call of calls) this.send([call]);
    else this.send(calls);
  }

  private send(calls: { append: ShardAppend; entries: PendingEntry[] }[]): void {
    const routedCount = this.laneCount;
    void appendToShards(
      this.redis,
      routedCount,
      this.options.maxLenApprox,
      calls.map((call) => call.append),
      this.options.replicaWait,
    )
      .catch((error: unknown): ShardAppendOutcome[] => calls.map(() => ({ status: 'failed', error: error as Error, replied: false })))
      .then((outcomes) => {
        calls.forEach((call, i) => {
          this.inFlight -= 1;
          const lane = this.lanes.get(call.append.shardIndex);
          if (lane) lane.busy = false;
          this.settle(call.append.shardIndex, call.entries, outcomes[i], routedCount);
        });
        this.schedule();
      });
  }

  private appendOf(shard: number, entries: PendingEntry[]): ShardAppend {
    const writeSeq = (this.writeSeqs.get(shard) ?? 0) + 1;
    this.writeSeqs.set(shard, writeSeq);
    // One order group per key in this call; entries without a key are in none.
    const groupOf = new Map<string, number>();
    const groups = new Array<number>(entries.length);
    const fields = new Array<(string | Buffer)[]>(entries.length);
    for (let i = 0; i < entries.length; i++) {
      const { key } = entries[i];
      fields[i] = entries[i].fields;
      if (key === undefined) groups[i] = 0;
      else {
        let group = groupOf.get(key);
        if (group === undefined) groupOf.set(key, (group = groupOf.size + 1));
        groups[i] = group;
      }
    }
    return { shardIndex: shard, ...this.options.shardKeys(shard), writeSeq, entries: fields, groups };
  }

  /** What a call's outcome means for each of its entries. */
  private settle(shard: number, entries: PendingEntry[], outcome: ShardAppendOutcome, routedCount: number): void {
    switch (outcome.status) {
      case 'applied':
        entries.forEach((entry, i) => {
          const result = outcome.results[i];
          if (result === undefined) this.failEntry(entry, shard, notAttempted(shard), false);
          else if (typeof result !== 'string') this.failEntry(entry, shard, result, false);
          // On the master, not confirmed on replicas: the caller decides (a retry may write it twice).
          else if (outcome.notReplicated) entry.unit.fail(entry.index, shard, outcome.notReplicated, true, result);
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

function notAttempted(shard: number | undefined): Error {
  return new Error(
    `not written: an earlier entry of its key failed${shard === undefined ? '' : ` (shard ${shard})`}, and a key's writes stop there so that a retry keeps its order`,
  );
}
