/**
 * The stored records of SPEC section 2, in the JSON shapes `CoordinatorAdmin.describeGroup` returns.
 * Epochs and versions are integers; times are ISO 8601 UTC strings.
 */

export type GroupState = 'EMPTY' | 'ASSIGNING' | 'RECONCILING' | 'STABLE';
export type MemberState = 'ACTIVE' | 'LEFT' | 'EXPIRED';

export interface ShardRef {
  shardIndex: number;
}

export interface GroupMetadata {
  streamPrefix: string;
  consumerGroup: string;
  groupEpoch: number;
  metadataVersion: number;
  assignmentEpoch: number;
  state: GroupState;
  shardCount: number;
  readableShardSet: number[];
  updatedAt: string;
  /**
   * True while the group cuts over from a resize (docs/resharding.md): `state` may say STABLE, yet
   * shards outside `readableShardSet` can hold entries that wait for the cutover.
   */
  cutoverInProgress: boolean;
  /** Entries waiting on shards the group cannot read yet (see `ShardDescription.readability`). */
  notYetReadableBacklog: number;
  /** The sum of every shard's `scheduled` (delayed entries, every group's). */
  scheduled: number;
  /** The sum of every shard's `deferred` (this group's deferred retries). */
  deferred: number;
  /** The sum of every shard's `parked` (this group's entries parked behind their key's deferred retries). */
  parked: number;
  /** The earliest of the shards' `nextDueAt`, per schedule (epoch ms on Redis' clock, or null when all are empty). */
  nextDueAt: ScheduleDueTimes;
  /** Redis' clock (epoch ms) when the group was read: a `nextDueAt` before it is due already (its owner releases it in its next turn). */
  describedAt: number;
}

/**
 * The counts of entries that wait outside a shard stream, one `ShardDescription` field each: what a
 * shard's row shows beside `lag` and `pending` (rsc describe, the dashboard). A count added to
 * `ShardDescription` and `GroupMetadata` is shown everywhere once it is listed here.
 */
export const SHARD_SCHEDULE_COUNTS = ['scheduled', 'deferred', 'parked'] as const;
export type ShardScheduleCount = (typeof SHARD_SCHEDULE_COUNTS)[number];

/**
 * When a shard's (or a group's) next entry is due, per schedule: epoch ms on Redis' clock (the due
 * time stored with it), or null when that schedule is empty. Only schedules with due times have one.
 */
export interface ScheduleDueTimes {
  /** The shard's delayed entries (every group's). */
  scheduled: number | null;
  /** The group's deferred retries. */
  deferred: number | null;
}

export interface MemberMetadata {
  memberId: string;
  memberName: string;
  state: MemberState;
  memberEpoch: number;
  metadataVersion: number;
  runtimeMaxConcurrency: number;
  activeConsumerWorkers: number;
  weight: number;
  currentAssignment: ShardRef[];
  revoking: ShardRef[];
  lastHeartbeatAt: string;
  memberLeaseExpiresAt: string;
  /** Static membership: the member's `memberInstanceId` (its memberId too); null for a dynamic member. */
  memberInstanceId: string | null;
  /** A static member's last `stop()` (it departed rather than left); null if it never stopped, or rejoined since. */
  departedAt: string | null;
  /**
   * A departed static member still in the group: its shards wait (unread) for its next instance
   * until then (its lease end), and then it expires and they move. Null otherwise.
   */
  awaitedUntil: string | null;
  /**
   * When an ACTIVE member joined whose join is not proven yet (SPEC 10.2): no answer it received in
   * time has shown that the answer to its join reached it, so it gets no shards and nobody revokes
   * any for it until one does. Null otherwise.
   */
  unprovenSince: string | null;
}

export interface TargetAssignment {
  streamPrefix: string;
  consumerGroup: string;
  assignmentEpoch: number;
  groupEpoch: number;
  members: Record<string, ShardRef[]>;
}

export interface CurrentAssignment {
  memberId: string;
  memberEpoch: number;
  owned: ShardRef[];
  revoking: ShardRef[];
  ackedRevocations: ShardRef[];
}

/**
 * Who holds a shard right now. OWNED: granted to `owner`; REVOKING: `owner` was asked to give it up
 * and has not acknowledged yet; UNOWNED: free (waiting for a target owner to pick it up).
 */
export type ShardOwnershipState = 'OWNED' | 'REVOKING' | 'UNOWNED';

/**
 * Whether the group reads a shard. readable: in its readable set; draining: removed by a shrink and
 * still read until the group has processed it; not-yet-readable: written to, but held back by an
 * ordered cutover; drained: removed by a shrink and processed (kept until `deleteDrainedShards`).
 */
export type ShardReadability = 'readable' | 'draining' | 'not-yet-readable' | 'drained';

export interface ShardDescription {
  shardIndex: number;
  readability: ShardReadability;
  /** `lag + pending`: entries of the shard the group has still to process. */
  backlog: number;
  owner: string | null;
  state: ShardOwnershipState;
  /** Entries in the shard stream not yet delivered to the group (Redis `XINFO GROUPS` lag). */
  lag: number;
  /** Entries delivered to the group and not yet acknowledged. */
  pending: number;
  /** Delayed entries in the shard's schedule, not due (or not released) yet: every group's (docs/runtime.md, Delayed delivery). */
  scheduled: number;
  /** The group's deferred retries on the shard, waiting for their due time (docs/runtime.md, Deferred retries). */
  deferred: number;
  /** When the shard's next delayed entry and the group's next deferred retry on it are due (null: none). */
  nextDueAt: ScheduleDueTimes;
  /** The group's entries parked on the shard behind their key's deferred retries (deferredOrder 'key'; docs/runtime.md, Deferred retries). */
  parked: number;
}

export interface GroupDescription {
  group: GroupMetadata;
  members: MemberMetadata[];
  targetAssignment: TargetAssignment;
  shards: ShardDescription[];
}

export interface StreamMetadata {
  streamPrefix: string;
  shardCount: number;
  metadataVersion: number;
  /** What a consumer group created now reads first (every group has its own; see GroupMetadata). */
  readableShardSet: number[];
  writableShardSet: number[];
  /** The shard count before the last resize. */
  previousShardCount?: number;
  /** When producers switched (or switch) from `previousShardCount` to `shardCount`. */
  switchAt?: string;
  /** 1 + the highest shard index whose stream may still hold entries (above shardCount after a shrink). */
  shardSpan: number;
  /**
   * 1 + the highest shard index whose dead-letter streams may hold letters: above `shardSpan` once
   * `deleteDrainedShards` retired shards (their dead letters are kept, and read and purged as any).
   */
  deadLetterSpan: number;
  /**
   * Shards `deleteDrainedShards` retired (out of `shardSpan`) and has not finished deleting: call
   * it again, or resize (which finishes it first). Absent when none (docs/resharding.md).
   */
  retiringShards?: number[];
  createdAt: string;
  updatedAt: string;
}
