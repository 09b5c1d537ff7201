import type { EventEmitter } from 'node:events';
import { shardForKey } from '../../producer/key-hash';
import { settledMove, type ReleaseOutcome, type ShardClient, type WaitingMove } from '../../redis/shard-client';
import { withTimeout } from '../abortable-sleep';
import { ShardError } from '../consumption-errors';
import { commandCallTimeoutMs, type ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, ShardSet, ShardState } from '../shard-state';
import { ScheduleGivers } from './schedule-givers';
import { forShardsSideBySide } from './shards-side-by-side';

/**
 * The most entries one release call moves (releaseDue-8.lua's MAX_RELEASED): one call is one script
 * run, during which Redis does nothing else; a shard with more due is called again at once.
 */
export const RELEASED_PER_CALL = 256;

/**
 * The most shards one turn of the read loop checks (the longest waiting first), as the sweeps
 * (SWEPT_SHARDS_PER_TURN): a member holding every shard of a large stream must not spend whole
 * turns releasing and read nothing meanwhile. The rest go in the next turns.
 */
export const RELEASE_SHARDS_PER_TURN = 1024;

/**
 * The most release calls one shard makes in a turn while more are due than one call releases, or
 * entries wait to move to their key's shard (each call settles the moves of the one before), and
 * the most moves (acceptMove calls, one after another: each waits for the one before) it makes in
 * a turn: a large due schedule is released at several calls a turn rather than one (a turn also
 * reads and hands out what was read), and after a resize a shard's due entries move over a few
 * turns; the member's reads are not held for long meanwhile (SPEC 10.8).
 */
export const RELEASE_CALLS_PER_TURN = 4;
export const MOVES_PER_TURN = 64;

/**
 * How many idle waits (`blockMs`) a shard's due entries may wait for a shard that gave it keys before
 * `problems` says so: its owner releases or moves them in its own turn, about one idle wait away;
 * longer means that shard has no owner reading it, or its owner is stuck.
 */
const HELD_VISIBLE_AFTER_BLOCKS = 3;

/**
 * Delayed delivery, the owner's side (docs/runtime.md, Delayed delivery): in its read loop's turn, a
 * member moves the due entries of each shard it reads from the shard's schedule into its stream
 * (releaseDue-8.lua: one script per call, fenced by the shard's token, due by Redis' clock), where
 * every group reads them like any new entry. No process of its own: whichever member owns the shard
 * (in any group) releases, exactly once. Each shard is checked again at its next due time, and at
 * least every `blockMs` (an entry scheduled meanwhile), so an entry is released within about
 * `blockMs` of its due time while its shard has an owner.
 */
export class ScheduleRelease {
  private readonly givers: ScheduleGivers;

  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {
    this.givers = new ScheduleGivers(client);
  }

  /** Releases what is due on every shard whose check is due, RELEASE_SHARDS_PER_TURN at most. */
  async releaseDue(): Promise<void> {
    const { history, shardCount, metadataVersion } = this.shards.resizeHistory;
    this.givers.setHistory(history, shardCount, metadataVersion);
    this.givers.beginTurn();
    const now = Date.now();
    const due = this.shards
      .all()
      .filter((state) => state.phase === 'reading' && state.nextScheduleCheckAt <= now)
      .sort((a, b) => a.nextScheduleCheckAt - b.nextScheduleCheckAt)
      .slice(0, RELEASE_SHARDS_PER_TURN);
    await forShardsSideBySide(due, (state) => this.release(state));
  }

  /** How long until the next shard's check is due (for the loop's idle wait), at most `blockMs`. */
  waitMs(now: number): number {
    let wait = this.options.blockMs;
    for (const state of this.shards.all()) {
      if (state.phase === 'reading') wait = Math.min(wait, state.nextScheduleCheckAt - now);
    }
    return wait;
  }

  /**
   * One shard's calls. Bounded (SPEC 10.1) like the recovery's calls: one that fails or runs past its
   * bound is an 'error' and a problems line naming the shard (its delayed entries wait meanwhile),
   * tried again after `blockMs`; a call that ran after all moved its entries once (the script is
   * atomic), and the next call moves the rest. A refusal (a newer token) moves nothing: the shard
   * is someone else's, and the next heartbeat says so. Called again while more are due, and while
   * entries wait to move (their key's shard is another since a resize: moved, and the outcome
   * settled in the next call), up to RELEASE_CALLS_PER_TURN calls a turn. A shard that received
   * keys in a resize releases (and moves) only entries due before the first entry still waiting in
   * the schedule of a shard that gave them (ScheduleGivers), whichever group's member calls: a
   * key's entries moved late must not land behind its later entries released meanwhile.
   */
  private async release(state: ShardState): Promise<void> {
    let outcome: ReleaseOutcome | null = null;
    let settled = '';
    let refused = '';
    let waiting = false;
    let waitsFor: number | undefined;
    let released = 0;
    const budget = { moves: MOVES_PER_TURN };
    let bounded: { bound: number; by: number } | undefined;
    try {
      // Bounded (SPEC 10.1) as a call: its reads go side by side, a few at most in the common case.
      bounded = await withTimeout(this.givers.bound(state.index), commandCallTimeoutMs(this.options));
      for (let round = 0; ; round++) {
        outcome = await withTimeout(
          this.client.releaseDue(
            state.index,
            state.grantEpoch,
            RELEASED_PER_CALL,
            settled,
            bounded?.bound,
            this.shards.resizeHistory.metadataVersion,
          ),
          commandCallTimeoutMs(this.options),
        );
        released += outcome?.released ?? 0;
        // Each call's counted-out key states and swept barriers, as it made them: a later call that
        // fails leaves these written in Redis all the same.
        if (outcome !== null && state.keyOrder && this.shards.isCurrent(state)) {
          for (const keyState of outcome.keyStates) state.keyOrder.update(keyState);
          state.keyOrder.forget(outcome.swept);
        }
        // Nothing is skipped silently (SPEC 9.1): entries whose fields were deleted from outside.
        if (outcome !== null && outcome.lost.length > 0) {
          const message = `shard ${state.index}: deferred or parked entries ${outcome.lost.join(', ')} of group ${this.options.consumerGroup} were due without their fields (deleted from outside the library); dropped, each counted out of its key's order`;
          this.events.emit('error', new ShardError(message, state.index));
        }
        if (outcome === null || round === RELEASE_CALLS_PER_TURN - 1 || !this.shards.isCurrent(state)) break;
        if (outcome.moves.length === 0) {
          settled = '';
          if (outcome.released < RELEASED_PER_CALL || outcome.nextDueInMs !== 0) break;
          continue;
        }
        // Stamped again as it was refused: this shard's marker has not heard of the resize its key's
        // shard refused it for (its marker is written a moment later): tried again after blockMs.
        const first = outcome.moves[0];
        if (refused === stampOf(first)) {
          waiting = true;
          break;
        }
        ({ settled, refused, waitsFor } = await this.moveToTheirShards(state.index, outcome.moves, budget));
        // Nothing could be settled: a key's shard not ready for it yet (tried again after blockMs),
        // or this turn's moves spent (the next turn goes on).
        if (settled === '') {
          waiting = budget.moves > 0;
          break;
        }
      }
    } catch (error) {
      if (!this.shards.isCurrent(state)) return;
      state.nextScheduleCheckAt = Date.now() + this.options.blockMs;
      const message = `shard ${state.index}: releasing its due delayed entries failed (${(error as Error).message}); they wait in its schedule`;
      state.problems.set('schedule', message);
      this.events.emit('error', new ShardError(`${message}, tried again in ${this.options.blockMs} ms`, state.index, error));
      return;
    }
    if (!this.shards.isCurrent(state)) return;
    // Nothing waits silently (SPEC 9.1): due entries held for a giver past a few idle waits say for which.
    if (outcome === null || outcome.heldDue === 0 || bounded === undefined) {
      state.scheduleHeldSince = undefined;
      state.problems.delete('schedule-order');
    } else {
      state.scheduleHeldSince ??= Date.now();
      if (Date.now() - state.scheduleHeldSince >= HELD_VISIBLE_AFTER_BLOCKS * this.options.blockMs) {
        state.problems.set(
          'schedule-order',
          `shard ${state.index}: ${outcome.heldDue} due delayed entries wait for shard ${bounded.by}, which gave this shard keys in a resize and still holds an entry due before them (released or moved by its owner in any group; none reads it now, or its owner is stuck)`,
        );
      }
    }
    // Nothing is skipped silently (SPEC 9.1): an entry that cannot move says where it waits to go.
    if (waitsFor === undefined) state.problems.delete('schedule');
    else {
      state.problems.set(
        'schedule',
        `shard ${state.index}: a due delayed entry waits to move to shard ${waitsFor}, whose routing marker does not take it yet (a resize not written or not switched there); tried again every ${this.options.blockMs} ms`,
      );
    }
    if (released > 0) this.events.emit('released', { shardIndex: state.index, count: released });
    const next =
      outcome === null || waiting || outcome.nextDueInMs < 0 ? this.options.blockMs : Math.min(this.options.blockMs, outcome.nextDueInMs);
    state.nextScheduleCheckAt = Date.now() + (outcome !== null && outcome.moves.length > 0 && !waiting ? 0 : next);
  }

  /**
   * The first step of each move, in move order (docs/runtime.md, Delayed delivery): an entry whose
   * key routes to this shard under its stamp stays ('s'); one whose key routes elsewhere is written
   * there (acceptMove-5.lua) and done ('d'), or refused there for a newer resize ('r', stamped again).
   * One at a time, and never past one that is not settled, nor a move past a stay not yet released:
   * a key's entries keep their order, and a key's shard has taken every earlier move of this shard
   * when it takes a later one. What is settled goes in the next release call (the second step).
   */
  private async moveToTheirShards(
    shardIndex: number,
    moves: readonly WaitingMove[],
    budget: { moves: number },
  ): Promise<{ settled: string; refused: string; waitsFor?: number }> {
    const settled: string[] = [];
    let refused = '';
    let stays = false;
    for (const move of moves) {
      // No key, or stamped where the shard had no routing marker (Redis lost it): it stays here.
      const target = move.key === '' || move.count < 1 ? shardIndex : shardForKey(move.key, move.count);
      if (target === shardIndex) {
        settled.push(settledMove('s', move));
        stays = true;
        continue;
      }
      if (stays || budget.moves === 0) break;
      budget.moves--;
      const answer = await withTimeout(this.client.acceptMove(target, shardIndex, move), commandCallTimeoutMs(this.options));
      if (answer === 'WAIT') return { settled: settled.join(' '), refused, waitsFor: target };
      settled.push(settledMove(answer === 'REFUSED' ? 'r' : 'd', move));
      if (answer === 'REFUSED') {
        refused = stampOf(move);
        break;
      }
    }
    return { settled: settled.join(' '), refused };
  }
}

/** A waiting move's stamp, with its id: the same after a refusal means it was stamped again as it was. */
function stampOf(move: WaitingMove): string {
  return `${move.id} ${move.seq} ${move.count} ${move.version}`;
}
