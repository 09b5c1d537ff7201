import { ENTRY_FIELD } from '../../protocol/entry-format';
import { compareStreamIds } from '../../protocol/stream-ids';
import type { KeyState } from '../../redis/shard-client';

/**
 * The most key states a member mirrors per shard (SPEC 10.3: a buffer fed from outside is bounded):
 * a state is a few dozen bytes and its key. Past it the mirror is incomplete: an entry of a key it
 * does not hold asks Redis (parkFenced-5.lua, one call per such entry) instead of running at once.
 */
export const MIRRORED_KEY_STATES_MAX = 4096;

/** HSCAN's COUNT hint when the mirror is loaded: 8 pages at the cap. */
export const KEY_STATES_PAGE = 512;

/** The key field of an entry (lua/includes/keyOrder.lua keyFieldOf): 'k' and its routing key, '-' without one. */
export function keyFieldOf(fields: readonly string[]): string {
  let field = '-';
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === ENTRY_FIELD.key) field = `k${fields[i + 1]}`;
  return field;
}

/**
 * What the scripts decide for an entry of a key in state `state` (parkFenced-5.lua), as a pure
 * function: the mirror's rule and the model test's. 'park': its key has entries in the group's
 * deferred schedule (they came first), or a barrier above it (it was read before its key's last
 * release, whose entries came first); but a released copy at or below the barrier runs (it came
 * before what was parked behind the barrier); 'hold': a released copy of a key released in part
 * (the rest of its release comes after it, next call); 'run': nothing to wait for.
 */
export function keyOrderVerdict(state: KeyState | undefined, entryId: string, releasedCopy: boolean): 'run' | 'park' | 'hold' {
  if (state === undefined) return 'run';
  if (state.count > 0) {
    if (releasedCopy && state.barrier !== '' && compareStreamIds(entryId, state.barrier) <= 0) return 'run';
    return releasedCopy && state.partial ? 'hold' : 'park';
  }
  if (state.barrier !== '' && !releasedCopy && compareStreamIds(entryId, state.barrier) < 0) return 'park';
  return 'run';
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
  verdict(field: string, entryId: string, releasedCopy: boolean): 'run' | 'ask' {
    const state = this.states.get(field);
    if (state === undefined) return this.complete ? 'run' : 'ask';
    return keyOrderVerdict(state, entryId, releasedCopy) === 'run' ? 'run' : 'ask';
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
