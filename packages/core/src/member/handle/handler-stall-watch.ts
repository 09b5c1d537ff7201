import type { EventEmitter } from 'node:events';
import { ShardError } from '../consumption-errors';
import type { ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, ShardState, Work } from '../shard-state';

/**
 * Follows the work that holds a worker through an asynchronous call (a handler, an entry's
 * asynchronous schema, a manual attempt waiting for its ack). A call that runs past
 * `handlerStallMs` is stalled (SPEC 10.8): one 'error' and a problems line name the shard and the
 * entry until the call ends, and its worker is given back (`onStalled`), so a hung handler cannot
 * stop the member's other shards. Its lane stays held: its shard's (its key's) later entries wait.
 *
 * One timer at a time, due when the oldest call followed reaches the bound: work is followed in the
 * order it took its worker, so the oldest is the first in the map.
 *
 * The dispatcher lets at most `runtimeMaxConcurrency` calls run stalled without a worker
 * (`onStalled`): past that a stalled call keeps its worker, so handler calls running at once stay
 * bounded (twice `runtimeMaxConcurrency`) however many hang (SPEC 10.7).
 */
export class HandlerStallWatch {
  private readonly followed = new Map<Work, ShardState>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly options: ResolvedMemberOptions,
    private readonly events: EventEmitter<PollerEvents>,
    /**
     * `work` stalled: true if it gave its worker back (it no longer counts against
     * `runtimeMaxConcurrency`), false if it keeps it (as many calls already run stalled as may).
     */
    private readonly onStalled: (state: ShardState, work: Work) => boolean,
  ) {}

  /** `work` took its worker just now for a call that did not complete synchronously. */
  follow(state: ShardState, work: Work): void {
    work.since = Date.now();
    this.followed.set(work, state);
    if (!this.timer) this.armFor(work.since);
  }

  /** `work`'s call ended (or it gave its worker back to wait): no longer followed; a stall of it clears. */
  ended(state: ShardState, work: Work): void {
    this.followed.delete(work);
    if (!work.stalled) return;
    work.stalled = false;
    state.problems.delete(stallKey(work));
  }

  private armFor(since: number): void {
    this.timer = setTimeout(() => this.check(), Math.max(0, since + this.options.handlerStallMs - Date.now()));
    // A watch must not keep a stopped member's process alive.
    this.timer.unref();
  }

  private check(): void {
    this.timer = undefined;
    const now = Date.now();
    for (const [work, state] of this.followed) {
      if (now - work.since < this.options.handlerStallMs) {
        this.armFor(work.since);
        return;
      }
      this.followed.delete(work);
      this.stall(state, work, now - work.since);
    }
  }

  private stall(state: ShardState, work: Work, ranMs: number): void {
    work.stalled = true;
    const freed = this.onStalled(state, work);
    const line = this.report(state, work, freed);
    this.events.emit('error', new ShardError(`${line} [${ranMs} ms so far]`, state.index));
  }

  /**
   * Sets the problems line of stalled `work`: whether its worker went to other work (`freed`) or it
   * keeps it because the stalled calls already number `runtimeMaxConcurrency`. Called again when a
   * call that kept its worker gives it back later. Returns the line.
   */
  report(state: ShardState, work: Work, freed: boolean): string {
    const limit = this.options.handlerStallMs;
    const first = work.ids[0];
    const what =
      this.options.ackMode === 'manual'
        ? `${first} has been neither acked nor nacked for more than handlerStallMs (${limit} ms)`
        : work.ids.length > 1
          ? `the batch handler of ${first} (and ${work.ids.length - 1} more) has run for more than handlerStallMs (${limit} ms)`
          : `the handler of ${first} has run for more than handlerStallMs (${limit} ms)`;
    const waits = this.options.lanes > 1 ? "its key's later entries wait" : "the shard's later entries wait";
    const others = freed
      ? 'the other shards go on (its worker is free for them)'
      : `it keeps its worker: ${this.options.runtimeMaxConcurrency} calls already run stalled (at most runtimeMaxConcurrency may), so new work waits for a worker`;
    const line = `shard ${state.index}: ${what}; ${waits} for it, ${others}`;
    state.problems.set(stallKey(work), line);
    return line;
  }
}

/** The problems key of a stalled call: one per lane (its first entry names it). */
function stallKey(work: Work): string {
  return `stalled ${work.ids[0]}`;
}
