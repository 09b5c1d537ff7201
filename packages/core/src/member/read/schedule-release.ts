import type { EventEmitter } from 'node:events';
import type { ShardClient } from '../../redis/shard-client';
import { withTimeout } from '../abortable-sleep';
import { ShardError } from '../consumption-errors';
import { commandCallTimeoutMs, type ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, ShardSet, ShardState } from '../shard-state';
import { forShardsSideBySide } from './shards-side-by-side';

/**
 * The most entries one release call moves (releaseDue-7.lua's MAX_RELEASED): one call is one script
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
 * Delayed delivery, the owner's side (docs/runtime.md, Delayed delivery): in its read loop's turn, a
 * member moves the due entries of each shard it reads from the shard's schedule into its stream
 * (releaseDue-7.lua: one script per call, fenced by the shard's token, due by Redis' clock), where
 * every group reads them like any new entry. No process of its own: whichever member owns the shard
 * (in any group) releases, exactly once. Each shard is checked again at its next due time, and at
 * least every `blockMs` (an entry scheduled meanwhile), so an entry is released within about
 * `blockMs` of its due time while its shard has an owner.
 */
export class ScheduleRelease {
  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /** Releases what is due on every shard whose check is due, RELEASE_SHARDS_PER_TURN at most. */
  async releaseDue(): Promise<void> {
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
   * One shard's call. Bounded (SPEC 10.1) like the recovery's calls: one that fails or runs past its
   * bound is an 'error' and a problems line naming the shard (its delayed entries wait meanwhile),
   * tried again after `blockMs`; a call that ran after all moved its entries once (the script is
   * atomic), and the next call moves the rest. A refusal (a newer token) moves nothing: the shard
   * is someone else's, and the next heartbeat says so.
   */
  private async release(state: ShardState): Promise<void> {
    let outcome: Awaited<ReturnType<ShardClient['releaseDue']>>;
    try {
      outcome = await withTimeout(
        this.client.releaseDue(state.index, state.grantEpoch, RELEASED_PER_CALL),
        commandCallTimeoutMs(this.options),
      );
    } catch (error) {
      if (!this.shards.isCurrent(state)) return;
      state.nextScheduleCheckAt = Date.now() + this.options.blockMs;
      const message = `shard ${state.index}: releasing its due delayed entries failed (${(error as Error).message}); they wait in its schedule`;
      state.problems.set('schedule', message);
      this.events.emit('error', new ShardError(`${message}, tried again in ${this.options.blockMs} ms`, state.index, error));
      return;
    }
    if (!this.shards.isCurrent(state)) return;
    state.problems.delete('schedule');
    if (outcome !== null && state.keyOrder) {
      for (const keyState of outcome.keyStates) state.keyOrder.update(keyState);
      state.keyOrder.forget(outcome.swept);
    }
    if (outcome !== null && outcome.released > 0) this.events.emit('released', { shardIndex: state.index, count: outcome.released });
    const next = outcome === null || outcome.nextDueInMs < 0 ? this.options.blockMs : Math.min(this.options.blockMs, outcome.nextDueInMs);
    state.nextScheduleCheckAt = Date.now() + next;
  }
}
