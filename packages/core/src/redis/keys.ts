import { assertConsumerGroup, assertKeyPrefix, assertMemberId, assertStreamPrefix } from '../protocol/names';

export const DEFAULT_KEY_PREFIX = 'rsc';

/**
 * A consumer group's coordinator keys, named as `includes/groupKeys.lua` names them (its `K` table);
 * what each holds is described there.
 */
export interface GroupKeys {
  streamMeta: string;
  groups: string;
  groupMeta: string;
  members: string;
  leases: string;
  target: string;
  owners: string;
  unconverged: string;
  deadlines: string;
  retained: string;
  events: string;
  weights: string;
  steady: string;
  unproven: string;
}

/** The order in which group scripts take the keys (`KEYS[1..14]` of includes/groupKeys.lua). */
const GROUP_KEY_ORDER: readonly (keyof GroupKeys)[] = [
  'streamMeta',
  'groups',
  'groupMeta',
  'members',
  'leases',
  'target',
  'owners',
  'unconverged',
  'deadlines',
  'retained',
  'events',
  'weights',
  'steady',
  'unproven',
];

/**
 * The one key builder (SPEC section 7). Every coordinator key of a stream prefix carries the hash tag
 * `{<streamPrefix>}`, so one script can touch all of them atomically on Redis Cluster; shard streams
 * carry a tag of their own per shard, so a cluster spreads their data and load over its slots, and a
 * shard's fencing token sits in its stream's slot. Names are validated here, before they reach Redis.
 */
export class KeyBuilder {
  readonly keyPrefix: string;

  constructor(keyPrefix: string = DEFAULT_KEY_PREFIX) {
    this.keyPrefix = assertKeyPrefix(keyPrefix);
  }

  private coordinatorTag(streamPrefix: string): string {
    return `${this.keyPrefix}:{${assertStreamPrefix(streamPrefix)}}`;
  }

  streamMeta(streamPrefix: string): string {
    return `${this.coordinatorTag(streamPrefix)}:meta`;
  }

  streamGroups(streamPrefix: string): string {
    return `${this.coordinatorTag(streamPrefix)}:groups`;
  }

  /**
   * One consumer group's coordinator keys by name, the names `includes/groupKeys.lua` gives them
   * (`K.groupMeta`, `K.owners`, ...), so that TypeScript never indexes the list by position.
   */
  groupKey(streamPrefix: string, consumerGroup: string): GroupKeys {
    const group = `${this.coordinatorTag(streamPrefix)}:g:${assertConsumerGroup(consumerGroup)}`;
    return {
      streamMeta: this.streamMeta(streamPrefix),
      groups: this.streamGroups(streamPrefix),
      groupMeta: `${group}:meta`,
      members: `${group}:members`,
      leases: `${group}:leases`,
      target: `${group}:target`,
      owners: `${group}:owners`,
      unconverged: `${group}:unconverged`,
      deadlines: `${group}:deadlines`,
      retained: `${group}:retained`,
      events: `${group}:events`,
      weights: `${group}:weights`,
      steady: `${group}:steady`,
      unproven: `${group}:unproven`,
    };
  }

  /** The fourteen keys every group script takes, in the order `includes/groupKeys.lua` names them. */
  groupKeys(streamPrefix: string, consumerGroup: string): string[] {
    const named = this.groupKey(streamPrefix, consumerGroup);
    return GROUP_KEY_ORDER.map((name) => named[name]);
  }

  groupEvents(streamPrefix: string, consumerGroup: string): string {
    return this.groupKey(streamPrefix, consumerGroup).events;
  }

  /** The group's pub/sub channel on which the coordinator tells members to heartbeat now. */
  groupWakeChannel(streamPrefix: string, consumerGroup: string): string {
    return `${this.coordinatorTag(streamPrefix)}:g:${assertConsumerGroup(consumerGroup)}:wake`;
  }

  shardStream(streamPrefix: string, shardIndex: number): string {
    return `${this.keyPrefix}:shard:{${assertStreamPrefix(streamPrefix)}:${shardIndex}}`;
  }

  /**
   * The shard channel (sharded pub/sub, SSUBSCRIBE) on which a write to the shard wakes the members
   * polling it on a Redis Cluster (appendEntries-5.lua), in the same slot as the shard stream.
   */
  shardWakeChannel(streamPrefix: string, shardIndex: number): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:wake`;
  }

  /** The fencing token of one group on one shard, in the same slot as the shard stream. */
  shardFence(streamPrefix: string, shardIndex: number, consumerGroup: string): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:fence:${assertConsumerGroup(consumerGroup)}`;
  }

  /**
   * A shard's routing marker (the shard count in effect from when), in the shard stream's slot, so
   * that a producer's write checks it atomically (appendEntries-5.lua). Kept when a drained shard is
   * deleted: it is what refuses late writes to it.
   */
  shardRouting(streamPrefix: string, shardIndex: number): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:routing`;
  }

  /**
   * A shard's schedule (docs/runtime.md, Delayed delivery): delayed entries by due time (sorted set,
   * score = due time in Redis ms), in the shard stream's slot, so that a producer's write schedules
   * one (appendEntries-5.lua) and an owner's release moves it into the stream (releaseDue-8.lua)
   * atomically with the stream. Every group sees a released entry: the schedule is the stream's.
   */
  shardSchedule(streamPrefix: string, shardIndex: number): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:schedule`;
  }

  /**
   * The delayed entries a shard took from other shards' schedules (acceptMove-5.lua: a hash, source
   * shard index -> the highest move sequence number taken), in the shard stream's slot, so that a
   * move sent twice lands once. Kept as the routing markers are.
   */
  shardMovesTaken(streamPrefix: string, shardIndex: number): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:moves-taken`;
  }

  /** The fields of the entries in a shard's schedule (hash: schedule id -> fields; includes/schedule.lua), beside it. */
  shardScheduledEntries(streamPrefix: string, shardIndex: number): string {
    return `${this.shardSchedule(streamPrefix, shardIndex)}:entries`;
  }

  /**
   * One group's deferred retries on a shard (docs/runtime.md, Deferred retries): entries its members
   * acknowledged and put off (deferFenced-5.lua), by due time, in the shard stream's slot. A
   * deferral is the group's own: other groups never see it in their schedules.
   */
  shardDeferred(streamPrefix: string, shardIndex: number, consumerGroup: string): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:deferred:${assertConsumerGroup(consumerGroup)}`;
  }

  /** The fields of a group's deferred entries on a shard (hash: schedule id -> fields), beside them. */
  shardDeferredEntries(streamPrefix: string, shardIndex: number, consumerGroup: string): string {
    return `${this.shardDeferred(streamPrefix, shardIndex, consumerGroup)}:entries`;
  }

  /**
   * The states of the keys with entries in a group's deferred schedule on a shard (deferredOrder
   * 'key', docs/runtime.md, Deferred retries): hash, an entry's key as a field (never as a key name,
   * SPEC 10.4) -> how many of its entries wait there, their due time and its barrier
   * (lua/includes/keyOrder.lua), beside them in the shard stream's slot.
   */
  shardDeferredKeys(streamPrefix: string, shardIndex: number, consumerGroup: string): string {
    return `${this.shardDeferred(streamPrefix, shardIndex, consumerGroup)}:keys`;
  }

  /**
   * One producer's write log on one shard (appendEntries-5.lua), in the shard stream's slot: its last
   * write call and that call's reply. A write whose reply was lost and that the client sends again is
   * answered from it instead of written twice.
   */
  shardProducerWrites(streamPrefix: string, shardIndex: number, producerId: string): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:writes:${assertMemberId(producerId)}`;
  }

  /**
   * The dead letters of one shard sent to `destination` (the member option `deadLetter.stream`, by
   * default the consumer group's name), in the shard stream's hash slot: a dead letter is written
   * atomically with the fencing check and the ack (SPEC 9.2), so it must sit beside the fence.
   * `CoordinatorAdmin.readDeadLetters` reads them across shards. Validated like a group name.
   */
  shardDeadLetterStream(streamPrefix: string, shardIndex: number, destination: string): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:dead-letter:${assertConsumerGroup(destination)}`;
  }

  /**
   * Replay marks of one destination's dead letters of one shard (dead-letter id -> JSON: when the
   * first replay began, when the current one did, and where its write landed once known; see
   * claimDeadLetterReplay-2.lua), beside the dead-letter stream, so that a replay checks and writes
   * them atomically with the letter: a mark left behind says a replay may have written the entry.
   */
  shardDeadLetterReplays(streamPrefix: string, shardIndex: number, destination: string): string {
    return `${this.shardDeadLetterStream(streamPrefix, shardIndex, destination)}:replays`;
  }

  /**
   * Replays of `destination`'s dead letters written to this shard (dead-letter ref -> entry id), in
   * the shard stream's slot, written atomically with each replay's write (replayEntry-4.lua): what a
   * replay run again looks up to tell whether an earlier one wrote, whatever retention has deleted
   * from the stream since (SPEC 10.6). Kept when a drained shard is deleted.
   */
  shardReplayRecords(streamPrefix: string, shardIndex: number, destination: string): string {
    return `${this.shardStream(streamPrefix, shardIndex)}:replayed:${assertConsumerGroup(destination)}`;
  }

  /**
   * What is left of one replay record once its dead letter is gone (the entry id, with a TTL: see
   * admin/replay-records.ts), in the shard stream's slot: a replay's write still in flight finds it
   * there (replayEntry-4.lua) and does not write the entry a second time (SPEC 10.6).
   */
  shardReplayTombstone(streamPrefix: string, shardIndex: number, destination: string, ref: string): string {
    return `${this.shardReplayRecords(streamPrefix, shardIndex, destination)}:done:${ref}`;
  }
}
