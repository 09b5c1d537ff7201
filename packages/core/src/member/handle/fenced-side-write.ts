import type { EventEmitter } from 'node:events';
import { sleep, withTimeout } from '../abortable-sleep';
import { ShardError } from '../consumption-errors';
import { commandCallTimeoutMs, type ResolvedMemberOptions, retryDelayMs } from '../member-options';
import type { PollerEvents, ShardSet, ShardState } from '../shard-state';

/** Backoff of a side write that failed: from this, doubling, up to the max. */
const SIDE_WRITE_RETRY_MS = 100;
const SIDE_WRITE_RETRY_MAX_MS = 5000;

/** What a side write is, in the words its errors and problems lines use. */
export interface SideWrite<R> {
  /** The problems line's kind, one per entry ('dead-letter <id>'): with lanes, several may fail at once. */
  problem: string;
  /** What failed ("writing the dead letter of <id>"). */
  doing: string;
  /** What was refused ("dead letter of <id>"). */
  refused: string;
  /** The fenced script call: its answer, or null when the shard's token refused it (nothing written, nothing acked). */
  call: () => Promise<R | null>;
  /**
   * Reports a written answer (the 'dead-letter' or 'deferred' event): called in the same turn as the
   * 'acknowledged' event, right after it, so that no listener sees the ack of a dead-lettered or
   * deferred entry without what became of it (the testing kit would take it for handled).
   */
  written: (answer: R) => void;
  /** Whether an answer acknowledged the entry (a park may answer that the entry runs instead); default: every answer does. */
  acked?: (answer: R) => boolean;
}

/**
 * Runs a side write of a shard's entry that carries the entry's ack (a dead letter, a deferred retry:
 * SPEC 9.2, fenced like an ack) until it is answered, while the shard is owned. A failed call
 * (WRONGTYPE, OOM, Redis unreachable, or no answer within commandCallTimeoutMs: SPEC 10.1) is
 * retried with backoff, each failure an 'error' and a `problems` line until it clears; the entry
 * keeps its lane and the caller holds no worker meanwhile (SPEC 10.8). A late first run is harmless:
 * the entry is then no longer pending and the retry writes nothing. Answered: the 'acknowledged'
 * event; refused by a newer token: an 'error' and the shard given up locally (its next owner decides
 * about the entry). Resolves with the answer, null when refused, undefined when the shard was
 * released first (the next owner handles the entry again).
 */
export async function sideWriteWhileOwned<R>(
  shards: ShardSet,
  events: EventEmitter<PollerEvents>,
  options: ResolvedMemberOptions,
  state: ShardState,
  entryId: string,
  write: SideWrite<R>,
): Promise<R | null | undefined> {
  for (let attempt = 1; !state.released.signal.aborted; attempt++) {
    let answer: R | null;
    try {
      answer = await withTimeout(write.call(), commandCallTimeoutMs(options));
    } catch (error) {
      const message = `shard ${state.index}: ${write.doing} failed (try ${attempt}): ${(error as Error).message}; later entries of the shard wait`;
      state.problems.set(write.problem, message);
      events.emit('error', new ShardError(`${message}, retrying`, state.index, error));
      await sleep(retryDelayMs(attempt, SIDE_WRITE_RETRY_MS, SIDE_WRITE_RETRY_MAX_MS), state.released.signal);
      continue;
    }
    state.problems.delete(write.problem);
    if (answer === null || (write.acked?.(answer) ?? true))
      events.emit('acknowledged', { shardIndex: state.index, grantEpoch: state.grantEpoch, ids: [entryId], accepted: answer !== null });
    // Refused: the shard is given up once, with one error (the parks of one call are refused together).
    if (answer === null && !state.released.signal.aborted) {
      events.emit(
        'error',
        new ShardError(
          `shard ${state.index}: ${write.refused} refused, the shard has a new owner; it decides about the entry`,
          state.index,
        ),
      );
      shards.lose(state, `shard ${state.index} has a newer owner (its fencing token refused the ${write.refused})`);
    } else if (answer !== null) write.written(answer);
    return answer;
  }
  return undefined;
}
