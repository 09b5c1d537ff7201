import { deferralOf } from '../../protocol/entry-format';
import { PARKS_PER_CALL } from '../../redis/park-batches';
import type { ShardClient } from '../../redis/shard-client';
import type { ResolvedMemberOptions } from '../member-options';
import type { QueuedEntry, ShardState } from '../shard-state';
import type { DeferralWriter } from './deferral-writer';
import { type EntryOrigin, keyFieldOf, originOf } from './key-order';

/** What DeferralWriter.park answers. */
type ParkOutcome = Awaited<ReturnType<DeferralWriter['park']>>;

/** How far past the queue's head one look ahead goes (a queue of keys it must pass over costs this at most). */
const LOOK_AHEAD_MAX = 4 * PARKS_PER_CALL;

/**
 * One ask about an entry (parkFenced-5.lua through DeferralWriter.park): the flush it went out with
 * (ShardClient.parkTurn) and its answer. Until its entry is decided for good (parked, appended
 * again, refused, or running), it holds the entry's key: nothing of the key after it is asked
 * ahead, except in the same flush (decided after it, in one go).
 */
export interface ParkAsk {
  readonly field: string;
  readonly turn: number;
  readonly answer: Promise<ParkOutcome>;
  /** Asked ahead of its entry's turn: a 'run' or 'hold' it answers is older than the turn. */
  readonly ahead: boolean;
}

/** A park, an append again, a resent call's, a refusal or a shard released: nothing left to decide. */
function final(outcome: ParkOutcome): boolean {
  return outcome !== 'run' && outcome !== 'hold';
}

/**
 * Asks about a shard's entries in their key's order (deferredOrder 'key') the way one call serves
 * many: with an entry that asks at its turn, the entries queued behind it that the mirror cannot
 * let run either are asked in the same flush (one parkFenced-5.lua call: ShardClient's park
 * batches), up to PARKS_PER_CALL in all. One at a time, a shard's turn was a call per parked entry
 * (its lane held until the answer), the call costing Redis about as much as the park's writes.
 *
 * Order: Redis decides a call's entries in the order given, and the asks go out in queue order; an
 * answer waits for its entry's turn (AttemptSequence.inKeyOrder). Asked early, an answer can only be
 * older than its turn: a park or an append again stands (written, acknowledged, behind everything of
 * its key asked before it); a 'run' or 'hold' is decided again at the turn (the mirror, or a new
 * ask). So an entry not decided for good holds its key (`undecided`): no later entry of the key is
 * asked ahead past it, unless in the flush it goes out with itself. An entry the mirror lets run is
 * passed over, and its key with it (its handler may defer it: what follows must be decided after).
 */
export class ParksAhead {
  /** Entries asked ahead of their turn: the queued entry -> its ask. */
  private readonly asked = new WeakMap<QueuedEntry, ParkAsk>();
  /** Per shard: key field -> the asks of its entries not decided for good. */
  private readonly undecided = new WeakMap<ShardState, Map<string, Set<ParkAsk>>>();

  constructor(
    private readonly deferrals: DeferralWriter,
    private readonly client: ShardClient,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /** Whether the entry was asked about ahead of its turn (its answer decides, whatever the mirror says now). */
  has(queued: QueuedEntry): boolean {
    return this.asked.has(queued);
  }

  /** The entry's ask made ahead of its turn, now its own (it stays undecided until `decided`). */
  take(queued: QueuedEntry): ParkAsk | undefined {
    const ask = this.asked.get(queued);
    this.asked.delete(queued);
    return ask;
  }

  /**
   * Asks about an entry at its turn (replacing its earlier ask, which stops holding its key), and
   * about the entries queued behind it with it.
   */
  ask(state: ShardState, queued: QueuedEntry, used: number, origin: EntryOrigin, replacing?: ParkAsk): ParkAsk {
    if (replacing) this.decided(state, replacing);
    const ask = this.send(state, queued, used, origin, false);
    this.lookAhead(state);
    return ask;
  }

  /** The entry of `ask` is decided (it runs, or it was given up): its key is free of it. */
  decided(state: ShardState, ask: ParkAsk): void {
    const asks = this.undecided.get(state)?.get(ask.field);
    if (asks === undefined) return;
    asks.delete(ask);
    if (asks.size === 0) this.undecided.get(state)?.delete(ask.field);
  }

  private send(state: ShardState, queued: QueuedEntry, used: number, origin: EntryOrigin, ahead: boolean): ParkAsk {
    let keys = this.undecided.get(state);
    if (keys === undefined) {
      keys = new Map();
      this.undecided.set(state, keys);
    }
    const field = keyFieldOf(queued.entry.fields);
    const ask: ParkAsk = { field, turn: this.client.parkTurn, answer: this.deferrals.park(state, queued.entry, used, origin), ahead };
    const asks = keys.get(field);
    if (asks) asks.add(ask);
    else keys.set(field, new Set([ask]));
    ask.answer.then(
      (outcome) => {
        if (final(outcome)) this.decided(state, ask);
      },
      // Its turn may never come (the shard released first): the failure was said (sideWriteWhileOwned).
      () => this.decided(state, ask),
    );
    return ask;
  }

  /** Asks about the queued entries behind the one that just asked (see the class). */
  private lookAhead(state: ShardState): void {
    const mirror = state.keyOrder;
    if (mirror === undefined || state.released.signal.aborted) return;
    const turn = this.client.parkTurn;
    const keys = this.undecided.get(state);
    const passed = new Set<string>();
    let asked = 1;
    const end = Math.min(state.queue.length, LOOK_AHEAD_MAX);
    for (let i = 0; i < end && asked < PARKS_PER_CALL; i++) {
      const queued = state.queue[i];
      if (this.asked.has(queued)) continue;
      const deferral = deferralOf(queued.entry.fields);
      // Another group's released copy: acknowledged unhandled at its turn, nothing of its key here.
      if (deferral !== undefined && deferral.consumerGroup !== this.options.consumerGroup) continue;
      const field = keyFieldOf(queued.entry.fields);
      if (passed.has(field)) continue;
      const origin = originOf(deferral);
      const holding = keys?.get(field);
      if (
        (holding !== undefined && [...holding].some((ask) => ask.turn !== turn)) ||
        mirror.verdict(field, queued.entry.id, origin) === 'run'
      ) {
        passed.add(field);
        continue;
      }
      const ask = this.send(state, queued, deferral?.attempts ?? 0, origin, true);
      ask.answer.catch(() => undefined);
      this.asked.set(queued, ask);
      asked++;
    }
  }
}
