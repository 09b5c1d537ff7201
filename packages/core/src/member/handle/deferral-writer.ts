import type { EventEmitter } from 'node:events';
import type { RawEntry, ShardClient } from '../../redis/shard-client';
import { sleep, withTimeout } from '../abortable-sleep';
import { ShardError } from '../consumption-errors';
import { commandCallTimeoutMs, type ResolvedMemberOptions, retryDelayMs } from '../member-options';
import type { PollerEvents, ShardSet, ShardState } from '../shard-state';

/** Backoff of a deferral write that failed: from this, doubling, up to the max (as a dead letter's). */
const DEFERRAL_RETRY_MS = 100;
const DEFERRAL_RETRY_MAX_MS = 5000;

/**
 * Writes deferred retries (docs/runtime.md, Deferred retries): the entry acknowledged and put in the
 * group's deferred schedule of its shard in one fenced script (deferFenced-4.lua), with the attempts
 * it has used. Its failures are a dead letter's: a failed write (WRONGTYPE, OOM, Redis unreachable,
 * no answer within commandCallTimeoutMs: SPEC 10.1) is retried with backoff while the shard is
 * owned, each an 'error' and a `problems` line until it clears; the entry keeps its lane meanwhile and
 * holds no worker (SPEC 10.8). Refused as fenced: nothing was scheduled or acknowledged (a zombie
 * cannot defer), and the shard is given up locally like any fenced call; its next owner runs the
 * entry. A member that dies after the write loses nothing: the entry is in Redis.
 */
export class DeferralWriter {
  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /** Defers the entry `delayMs` (Redis' clock) after `attempts` attempts; resolves true when written. */
  async defer(state: ShardState, entry: RawEntry, attempts: number, delayMs: number, reason: string): Promise<boolean> {
    const problem = `deferral ${entry.id}`;
    for (let attempt = 1; !state.released.signal.aborted; attempt++) {
      let dueAt: number | '' | null;
      try {
        // A late first run is harmless: the entry is then no longer pending, and the retry writes nothing.
        dueAt = await withTimeout(
          this.client.defer(state.index, state.grantEpoch, entry, attempts, delayMs),
          commandCallTimeoutMs(this.options),
        );
      } catch (error) {
        const message = `shard ${state.index}: deferring the retry of ${entry.id} failed (try ${attempt}): ${(error as Error).message}; its lane waits`;
        state.problems.set(problem, message);
        this.events.emit('error', new ShardError(`${message}, retrying`, state.index, error));
        await sleep(retryDelayMs(attempt, DEFERRAL_RETRY_MS, DEFERRAL_RETRY_MAX_MS), state.released.signal);
        continue;
      }
      state.problems.delete(problem);
      this.events.emit('acknowledged', {
        shardIndex: state.index,
        grantEpoch: state.grantEpoch,
        ids: [entry.id],
        accepted: dueAt !== null,
      });
      if (dueAt === null) {
        this.events.emit(
          'error',
          new ShardError(
            `shard ${state.index}: deferral of ${entry.id} refused, the shard has a new owner; it decides about the entry`,
            state.index,
          ),
        );
        this.shards.lose(state, `shard ${state.index} has a newer owner (its fencing token refused the deferral of ${entry.id})`);
        return false;
      }
      this.events.emit('deferred', { shardIndex: state.index, id: entry.id, attempts, dueAt: dueAt === '' ? 0 : dueAt, reason });
      return true;
    }
    return false;
  }
}
