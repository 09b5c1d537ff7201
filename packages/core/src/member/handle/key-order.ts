import { type Deferral, ENTRY_FIELD } from '../../protocol/entry-format';
import { compareStreamIds } from '../../protocol/stream-ids';
import type { KeyState } from '../../redis/shard-client';

/**
 * The most key states a member mirrors per shard (SPEC 10.3: a buffer fed from outside is bounded):
 * a state is a few dozen bytes and its key. Past it the mirror is incomplete: an entry of a key it
 * does not hold asks Redis (parkFenced-5.lua: the turn's such entries of a shard in one call) instead of running at once.
 */
export const MIRRORED_KEY_STATES_MAX = 4096;

/** HSCAN's COUNT hint when the mirror is loaded: 8 pages at the cap. */
export const KEY_STATES_PAGE = 512;

/** An entry's routing key, undefined without one (the last `k` field, as the scripts read it). */
export function routingKeyOf(fields: readonly string[]): string | undefined {
  let key: string | undefined;
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === ENTRY_FIELD.key) key = fields[i + 1];
  return key;
}

/** The key field of an entry (lua/includes/keyOrder.lua keyFieldOf): 'k' and its routing key, '-' without one. */
export function keyFieldOf(fields: readonly string[]): string {
  const key = routingKeyOf(fields);
  return key === undefined ? '-' : `k${key}`;
}

/**
 * How an entry of a key stands to the key's order (parkFenced-5.lua): an original, a copy released
 * from the group's schedule (deferred or parked), or a copy appended again (`r`).
 */
export type EntryOrigin = 'original' | 'released' | 'reappended';

/** An entry's origin from its deferral fields (deferralOf): none, an original. */
export function originOf(deferral: Deferral | undefined): EntryOrigin {
  return deferral === undefined ? 'original' : deferral.reappended ? 'reappended' : 'released';
}

/**
 * What the scripts decide for an entry of a key in state `state` (parkFenced-5.lua), as a pure
 * function: the mirror's rule and the model test's (key-order.spec.ts). It rests on one fact: of a
 * key's unhandled entries, the released copies (in stream order) come before the rest (originals,
 * and copies appended again, in stream order) in the key's order, since an entry is released only
 * once it was dispatched, and appended again only behind the copies before it.
 * - While the key's release stopped part way (`partial`: the rest is due, next call), everything
 *   of it waits ('hold'): the rest is released behind the copies in the stream, so nothing may be
 *   appended again or parked between them.
 * - A released copy of the current cycle (at or past `floor`, the first copy released since the
 *   key's last deferral) runs once nothing of the key waits in the schedule ('hold' until then).
 * - A released copy from before the cycle comes after the cycle's copies: parked behind a waiting
 *   key, else appended again at the stream end ('reappend').
 * - An original below the key's barrier (the last copy appended to the stream, released or
 *   appended again), or a copy appended again below the key's last released copy, may be behind
 *   unhandled copies: appended again at the stream end. (Copies appended again do not hold each
 *   other back: they were appended in their order.)
 * - Else: parked behind a waiting key, or it runs.
 */
export function keyOrderVerdict(state: KeyState | undefined, entryId: string, origin: EntryOrigin): 'run' | 'park' | 'hold' | 'reappend' {
  if (state === undefined) return 'run';
  if (state.partial) return 'hold';
  if (origin === 'released') {
    if (state.floor !== '' && compareStreamIds(entryId, state.floor) >= 0) return state.count > 0 ? 'hold' : 'run';
    if (state.count > 0) return 'park';
    return state.floor === '' ? 'run' : 'reappend';
  }
  const barrier = origin === 'original' ? state.barrier : state.released;
  if (barrier !== '' && compareStreamIds(entryId, barrier) < 0) return 'reappend';
  return state.count > 0 ? 'park' : 'run';
}

/**
 * Whether entry `entryId` of a key in state `state` may be deferred (deferFenced-5.lua; else 'busy':
 * it is retried in place, holding its key): only while nothing of the key waits in the schedule
 * (entries due before a deferral would come out ahead of it), and no copy appended again since its
 * last release is still behind it in the stream (its release would come out after such a copy).
 * An entry at or past the key's barrier has no copy behind it (the barrier is the last one).
 */
export function keyMayDefer(state: KeyState | undefined, entryId: string): boolean {
  if (state === undefined) return true;
  return state.count === 0 && (state.barrier === state.released || compareStreamIds(entryId, state.barrier) >= 0);
}

/**
 * A member's mirror of its group's key states on one shard it owns (deferredOrder 'key'): loaded
 * when the shard is claimed, kept by the replies of its own deferrals, parks and releases (only the
 * shard's owner writes the states: every write is fenced). It answers at dispatch whether an entry
 * runs with no Redis call; anything else is asked of Redis (parkFenced-5.lua), which decides on the
 * states themselves. It may be behind Redis only by counting more (a release whose reply was lost
 * counted out what the mirror still counts), never fewer: a deferral or park is retried until its
 * reply comes, with the state in it. So 'run' from the mirror is always right.
 */
export class KeyOrderMirror {
  private readonly states = new Map<string, KeyState>();

  constructor(
    loaded: readonly KeyState[],
    /** False when the states did not all fit (MIRRORED_KEY_STATES_MAX): keys it does not hold are asked about. */
    private complete: boolean,
  ) {
    for (const state of loaded) this.update(state);
  }

  get size(): number {
    return this.states.size;
  }

  /** 'run' when the mirror proves the entry may run now; 'ask' when Redis must decide. */
  verdict(field: string, entryId: string, origin: EntryOrigin): 'run' | 'ask' {
    const state = this.states.get(field);
    if (state === undefined) return this.complete ? 'run' : 'ask';
    return keyOrderVerdict(state, entryId, origin) === 'run' ? 'run' : 'ask';
  }

  /** A state a script replied with; one with nothing left is forgotten. */
  update(state: KeyState): void {
    if (state.count === 0 && state.barrier === '') {
      this.states.delete(state.field);
      return;
    }
    if (!this.states.has(state.field) && this.states.size >= MIRRORED_KEY_STATES_MAX) {
      this.complete = false;
      return;
    }
    this.states.set(state.field, state);
  }

  /** Barriers the release swept (no entry can be below them any more). */
  forget(fields: readonly string[]): void {
    for (const field of fields) {
      const state = this.states.get(field);
      if (state && state.count === 0) this.states.delete(field);
    }
  }
}
