import type { ErrorCode } from './error-codes';
import type { GroupState } from './records';

/** Epoch values with a protocol meaning of their own (SPEC section 3). */
export const JOIN_EPOCH = 0;
export const LEAVE_EPOCH = -1;

/** One protocol step of one member (SPEC section 3). Shard lists are plain shard indices. */
export interface HeartbeatRequest {
  streamPrefix: string;
  consumerGroup: string;
  memberId: string;
  /** 0 = join or rejoin with a full report, -1 = leave, > 0 = normal heartbeat. */
  memberEpoch: number;
  memberName?: string;
  runtimeMaxConcurrency?: number;
  activeConsumerWorkers?: number;
  weight?: number;
  sessionTimeoutMs?: number;
  rebalanceTimeoutMs?: number;
  /** The stream metadata version the member runs with (0 before it has seen any). */
  metadataVersion?: number;
  owned?: number[];
  revoking?: number[];
  ackedRevocations?: number[];
  /**
   * Identifies one process (one CoordinatedMember instance) using `memberId`; 0-128 characters of
   * A-Z a-z 0-9 . _ -. A join from another instance while the member's lease is live is refused
   * with FENCED_INSTANCE_ID. Empty or absent: no identity (the record then belongs to any caller).
   */
  instanceId?: string;
  /**
   * The memberId is a static member's `memberInstanceId` (docs/runtime.md "Static membership"): a
   * leave (-1) keeps the membership for the next instance, and a join from a new instance takes the
   * assignment over once the instance holding it went away or fell silent.
   */
  staticMember?: boolean;
  /**
   * Redis time (ms since the epoch, as Redis `TIME` counts it) after which the request must change
   * nothing: the caller stops waiting for the answer then. A request that reaches Redis later (it
   * sat in a client's offline queue, or on a slow link) is refused with DEADLINE_EXCEEDED, so a
   * heartbeat whose answer its member will ignore cannot renew a lease the member gave up (SPEC 9.1).
   * Absent: no deadline. A member derives it from `serverTimeMs` of earlier answers.
   */
  deadline?: number;
  /**
   * Redis time (`serverTimeMs`) of the latest answer the caller received in time (within the time
   * it waits for one), accepted or refused, 0 before any (SPEC 10.2). A request of a member that
   * holds no live lease is refused with NO_TIMELY_ANSWER, changing nothing, unless this is within
   * the last third of its session: a member whose answers all come back late is not made a member.
   * Absent: the caller does not track its answers (a protocol-level caller); no such check.
   */
  answeredAt?: number;
  /**
   * Redis time (`serverTimeMs`) of the latest accepted answer (errorCode NONE) the caller received
   * in time, 0 before any; sent with `answeredAt` (0 when absent). A request of a member with a
   * live lease is refused with NO_TIMELY_ANSWER, changing nothing, unless this is at or after its
   * last renewal: only an accepted answer proves that renewal reached the member (a refusal may come
   * back in time while every answer that renews comes late), so Redis stops renewing a member whose
   * accepted answers come back late.
   */
  acceptedAt?: number;
}

export interface HeartbeatResponse {
  errorCode: ErrorCode;
  /** Why the request was refused; empty for NONE. */
  errorMessage: string;
  memberEpoch: number;
  heartbeatIntervalMs: number;
  sessionTimeoutMs: number;
  /** The shards the member may own now. */
  assignedShards: number[];
  /** The shards the member must stop reading and acknowledge in `ackedRevocations`. */
  revokeShards: number[];
  /** Target shards not yet released by their previous owners. */
  pendingShards: number[];
  groupEpoch: number;
  assignmentEpoch: number;
  state: GroupState;
  metadataVersion: number;
  shardCount: number;
  /**
   * The shards consumers must read. Sent only when the request's `metadataVersion` differs from
   * the stream's (the set can be large and changes only with the metadata version); otherwise
   * `undefined`, meaning "unchanged since the version you reported".
   */
  readableShardSet?: number[];
  /** True when this member holds the assignment lease and must compute the target. */
  computeAssignment: boolean;
  /** Present when `computeAssignment` is true: the assignor's input, read atomically at `groupEpoch`. */
  assignmentInput?: AssignmentInput;
  /**
   * Which life of the group this is (Redis TIME in microseconds when it was created, as a decimal
   * string; '0' for a group created before incarnations existed). The first part of every shard
   * fencing token, so a recreated group's tokens always win over its former life's (SPEC 9.3).
   */
  incarnation: string;
  /**
   * Redis time (ms) when the script ran; present on every answer from this version on, refusals
   * included. A member bounds Redis's clock against its own with it, to set `deadline`.
   */
  serverTimeMs?: number;
  /**
   * True while the member's join is not proven (SPEC 10.2): Redis took it on a fresh answer, which
   * proves the link but not that this answer comes back in time. The member gets no shards and no
   * one revokes any for it until a later request shows (`acceptedAt`) that an accepted answer since
   * the join reached it in time; it sends that request at once. False on refusals, and for callers
   * that do not send `answeredAt` (they are never unproven).
   */
  unproven?: boolean;
}

export interface AssignmentMember {
  memberId: string;
  weight: number;
}

/** What an assignor sees: everything it needs, nothing it could use to do IO. */
export interface AssignmentInput {
  groupEpoch: number;
  /** ACTIVE members, sorted by memberId. */
  members: AssignmentMember[];
  /** Sorted ascending. */
  readableShardSet: number[];
  /** The persisted target (possibly naming members that are gone), memberId -> shard indices. */
  previousTarget: Record<string, number[]>;
}

/** memberId -> shard indices. Members without shards may be absent or map to `[]`. */
export type AssignmentPlan = Record<string, number[]>;
