import { ErrorCode } from './error-codes';

/** Base class of every protocol outcome other than NONE; `code` is the protocol's own name. */
export class CoordinatorError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** The member is not (or no longer) an ACTIVE member of the group: rejoin with epoch 0. */
export class UnknownMemberIdError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.UNKNOWN_MEMBER_ID, message);
  }
}

/** The member's epoch or ownership report is stale or false: drop ownership, rejoin with epoch 0. */
export class FencedMemberEpochError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.FENCED_MEMBER_EPOCH, message);
  }
}

/** A field of the request is malformed; the message names it. Nothing was changed. */
export class InvalidRequestError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.INVALID_REQUEST, message);
  }
}

/**
 * GROUP_NOT_FOUND: the group (or, as its subclass `StreamNotFoundError`, the whole stream) does not
 * exist. `describeGroup` throws it for a group nobody has joined yet.
 */
export class GroupNotFoundError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.GROUP_NOT_FOUND, message);
  }
}

/** What an admin caller can do about a missing stream: the default `remedy` of StreamNotFoundError. */
const CREATE_THE_STREAM = 'create it with CoordinatorAdmin.createStream (listStreams() lists the streams that exist)';

/**
 * The stream prefix has no metadata: it was never created, or Redis lost its keys (a restart without
 * persistence, FLUSHALL). Every group of a stream lives in its metadata, so a missing stream is a
 * missing group too: this is a subclass of `GroupNotFoundError` with the same code
 * (GROUP_NOT_FOUND), and code that catches that class, or checks that code, catches this as well.
 * The message names the stream, then what to do; `context` (the caller or the operation) comes
 * first. The `remedy` names what the caller can do where it is: a producer is told of its
 * `shardCount`, a member of its own, an admin caller of `createStream`; a layer above that
 * rethrows it (the Nest StreamPublisher, the `rsc` command) names its own options instead.
 *
 * @example
 * try {
 *   await admin.trim('orders');
 * } catch (error) {
 *   if (error instanceof StreamNotFoundError) logger.warn(`no stream ${error.streamPrefix} yet`);
 * }
 */
export class StreamNotFoundError extends GroupNotFoundError {
  constructor(
    readonly streamPrefix: string,
    readonly context?: string,
    readonly remedy: string = CREATE_THE_STREAM,
  ) {
    super(`${context ? `${context}: ` : ''}stream "${streamPrefix}" does not exist (it has no metadata): ${remedy}`);
  }
}

/** A target assignment was computed for a groupEpoch that is no longer current. */
export class StaleGroupEpochError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.STALE_GROUP_EPOCH, message);
  }
}

/** A target assignment breaks invariant 5 (only ACTIVE members, every readable shard exactly once). */
export class InvalidAssignmentError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.INVALID_ASSIGNMENT, message);
  }
}

/** `createStream` was called with a shard count other than the stream's. */
export class ShardCountConflictError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.SHARD_COUNT_CONFLICT, message);
  }
}

/** A resize was asked for while a group still cuts over (or drains) from the previous one. */
export class ResizeInProgressError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.RESIZE_IN_PROGRESS, message);
  }
}

/**
 * Another live process is a member of the group under this memberId (SPEC 9.4, Kafka's
 * FENCED_INSTANCE_ID). The member that gets it stops for good: it never shares the id's shards.
 * Give every member process its own memberId (the default, a UUIDv7, is).
 */
export class FencedInstanceIdError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.FENCED_INSTANCE_ID, message);
  }
}

/**
 * A coordinator request reached Redis after its `deadline`, when its caller no longer waited for the
 * answer: nothing changed. A member counts it as a heartbeat that got no answer (and sends another).
 */
export class DeadlineExceededError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.DEADLINE_EXCEEDED, message);
  }
}

/**
 * The member's answers come back late (SPEC 10.2): it got none in time since its lease was last
 * renewed, so the coordinator changed nothing. A member answered so in time sends again at once.
 */
export class NoTimelyAnswerError extends CoordinatorError {
  constructor(message: string) {
    super(ErrorCode.NO_TIMELY_ANSWER, message);
  }
}

const ERROR_CLASSES: Record<Exclude<ErrorCode, 'NONE'>, new (message: string) => CoordinatorError> = {
  UNKNOWN_MEMBER_ID: UnknownMemberIdError,
  FENCED_MEMBER_EPOCH: FencedMemberEpochError,
  INVALID_REQUEST: InvalidRequestError,
  GROUP_NOT_FOUND: GroupNotFoundError,
  STALE_GROUP_EPOCH: StaleGroupEpochError,
  INVALID_ASSIGNMENT: InvalidAssignmentError,
  SHARD_COUNT_CONFLICT: ShardCountConflictError,
  RESIZE_IN_PROGRESS: ResizeInProgressError,
  FENCED_INSTANCE_ID: FencedInstanceIdError,
  DEADLINE_EXCEEDED: DeadlineExceededError,
  NO_TIMELY_ANSWER: NoTimelyAnswerError,
};

/** The one place that turns a protocol code into its typed error. */
export function toCoordinatorError(code: Exclude<ErrorCode, 'NONE'>, message: string): CoordinatorError {
  return new ERROR_CLASSES[code](message);
}
