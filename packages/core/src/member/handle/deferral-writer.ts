import type { EventEmitter } from 'node:events';
import type { RawEntry, ShardClient } from '../../redis/shard-client';
import type { ResolvedMemberOptions } from '../member-options';
import type { PollerEvents, ShardSet, ShardState } from '../shard-state';
import { sideWriteWhileOwned } from './fenced-side-write';
import { type EntryOrigin, keyFieldOf, routingKeyOf } from './key-order';

/**
 * Writes deferred retries and parks (docs/runtime.md, Deferred retries): the entry acknowledged and
 * put in the group's deferred schedule of its shard in one fenced script (deferFenced-5.lua,
 * parkFenced-5.lua), with the attempts it has used. Their failures are a dead letter's
 * (sideWriteWhileOwned): retried while the shard is owned, visibly, the entry keeping its lane and
 * no worker. Refused as fenced: nothing was scheduled or acknowledged (a zombie can neither defer nor
 * park) and the shard is given up locally; its next owner runs the entry. A member that dies after
 * the write loses nothing: the entry is in Redis. Every reply carries the key's state, which the
 * shard's mirror takes (deferredOrder 'key').
 */
export class DeferralWriter {
  constructor(
    private readonly shards: ShardSet,
    private readonly client: ShardClient,
    private readonly events: EventEmitter<PollerEvents>,
    private readonly options: ResolvedMemberOptions,
  ) {}

  /**
   * Defers the entry `delayMs` (Redis' clock) after `attempts` attempts: 'deferred' when written;
   * 'busy' when its key still counts entries parked behind a barrier (deferFenced-5.lua: nothing
   * written, the caller retries in place); 'gone' when refused or the shard was released first.
   */
  async defer(
    state: ShardState,
    entry: RawEntry,
    attempts: number,
    delayMs: number,
    reason: string,
  ): Promise<'deferred' | 'busy' | 'gone'> {
    // Counted in its key's state only where the mirror follows it: 'key' order, and a member that defers.
    const keyField = state.keyOrder ? keyFieldOf(entry.fields) : undefined;
    const answer = await sideWriteWhileOwned(this.shards, this.events, this.options, state, entry.id, {
      problem: `deferral ${entry.id}`,
      doing: `deferring the retry of ${entry.id}`,
      refused: `deferral of ${entry.id}`,
      call: () => this.client.defer(state.index, state.grantEpoch, entry, attempts, delayMs, keyField),
      // '' : a resent call whose first run landed (the entry was no longer pending): its due time is not known.
      acked: ({ dueAt }) => dueAt !== 'busy',
      written: ({ dueAt, keyState }) => {
        if (keyState) state.keyOrder?.update(keyState);
        if (dueAt === 'busy') return;
        this.events.emit('deferred', { shardIndex: state.index, id: entry.id, attempts, dueAt: dueAt === '' ? 0 : dueAt, reason });
      },
    });
    if (answer === null || answer === undefined) return 'gone';
    return answer.dueAt === 'busy' ? 'busy' : 'deferred';
  }

  /**
   * Asks Redis where the entry stands in its key's order (parkFenced-5.lua, which decides on the
   * key's state): 'park' or 'reappend' (acknowledged, written behind what comes before it), 'run'
   * or 'hold' (nothing written); null when refused (the shard given up) or undefined when the shard
   * was released first.
   */
  async park(
    state: ShardState,
    entry: RawEntry,
    attempts: number,
    origin: EntryOrigin,
  ): Promise<'park' | 'reappend' | 'run' | 'hold' | null | undefined> {
    const answer = await sideWriteWhileOwned(this.shards, this.events, this.options, state, entry.id, {
      problem: `park ${entry.id}`,
      doing: `keeping ${entry.id} behind its key's deferred entries`,
      refused: `park of ${entry.id}`,
      call: () => this.client.park(state.index, state.grantEpoch, entry, attempts, keyFieldOf(entry.fields), origin),
      acked: ({ outcome }) => outcome === 'park' || outcome === 'reappend' || outcome === '',
      written: ({ outcome, keyState }) => {
        state.keyOrder?.update(keyState);
        if (outcome === 'run' || outcome === 'hold') return;
        // dueAt 0: appended again at the stream end, or a resent call's first run did it.
        this.events.emit('parked', {
          shardIndex: state.index,
          id: entry.id,
          key: routingKeyOf(entry.fields),
          attempts,
          dueAt: outcome === 'park' ? keyState.due : 0,
        });
      },
    });
    if (answer === null || answer === undefined) return answer;
    return answer.outcome === '' ? 'park' : answer.outcome;
  }
}
