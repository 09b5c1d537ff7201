import type { EventEmitter } from 'node:events';
import type { RawEntry, ShardClient } from '../../redis/shard-client';
import type { ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, ShardSet, ShardState } from '../shard-state';
import { sideWriteWhileOwned } from './fenced-side-write';

/**
 * Writes deferred retries (docs/runtime.md, Deferred retries): the entry acknowledged and put in the
 * group's deferred schedule of its shard in one fenced script (deferFenced-4.lua), with the attempts
 * it has used. Its failures are a dead letter's (sideWriteWhileOwned): retried while the shard is
 * owned, visibly, the entry keeping its lane and no worker. Refused as fenced: nothing was
 * scheduled or acknowledged (a zombie cannot defer) and the shard is given up locally; its next
 * owner runs the entry. A member that dies after the write loses nothing: the entry is in Redis.
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
    const dueAt = await sideWriteWhileOwned(this.shards, this.events, this.options, state, entry.id, {
      problem: `deferral ${entry.id}`,
      doing: `deferring the retry of ${entry.id}`,
      refused: `deferral of ${entry.id}`,
      call: () => this.client.defer(state.index, state.grantEpoch, entry, attempts, delayMs),
      // '' : a resent call whose first run landed (the entry was no longer pending): its due time is not known.
      written: (due) =>
        this.events.emit('deferred', { shardIndex: state.index, id: entry.id, attempts, dueAt: due === '' ? 0 : due, reason }),
    });
    return dueAt !== null && dueAt !== undefined;
  }
}
