/**
 * Protocol outcome codes. The Lua scripts return the numeric value (mirrored in
 * `redis/lua/includes/errorCodes.lua`, checked by a test); the TypeScript API speaks the names.
 */
export const ErrorCode = {
  NONE: 'NONE',
  UNKNOWN_MEMBER_ID: 'UNKNOWN_MEMBER_ID',
  FENCED_MEMBER_EPOCH: 'FENCED_MEMBER_EPOCH',
  INVALID_REQUEST: 'INVALID_REQUEST',
  GROUP_NOT_FOUND: 'GROUP_NOT_FOUND',
  STALE_GROUP_EPOCH: 'STALE_GROUP_EPOCH',
  INVALID_ASSIGNMENT: 'INVALID_ASSIGNMENT',
  SHARD_COUNT_CONFLICT: 'SHARD_COUNT_CONFLICT',
  RESIZE_IN_PROGRESS: 'RESIZE_IN_PROGRESS',
  /** Another live instance holds this memberId (SPEC 9.4): this instance must stop for good. */
  FENCED_INSTANCE_ID: 'FENCED_INSTANCE_ID',
  /**
   * The request reached Redis after its `deadline` (Redis time): the caller had stopped waiting for
   * the answer by then, so the coordinator changed nothing (a late heartbeat must not renew a lease
   * its member already gave up).
   */
  DEADLINE_EXCEEDED: 'DEADLINE_EXCEEDED',
  /**
   * The member got no accepted answer in time since its lease was last renewed (or, without a live
   * lease, no answer within the last third of its session): its answers come back late, so the
   * coordinator changed nothing and lets its lease run out (SPEC 10.2). The answer carries Redis
   * time: received in time, it proves the link to the member's next join (`answeredAt`), never a
   * renewal (`acceptedAt`).
   */
  NO_TIMELY_ANSWER: 'NO_TIMELY_ANSWER',
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Numeric wire values, in the order the Lua mirror defines them. */
export const ERROR_CODE_BY_NUMBER: readonly ErrorCode[] = [
  ErrorCode.NONE,
  ErrorCode.UNKNOWN_MEMBER_ID,
  ErrorCode.FENCED_MEMBER_EPOCH,
  ErrorCode.INVALID_REQUEST,
  ErrorCode.GROUP_NOT_FOUND,
  ErrorCode.STALE_GROUP_EPOCH,
  ErrorCode.INVALID_ASSIGNMENT,
  ErrorCode.SHARD_COUNT_CONFLICT,
  ErrorCode.RESIZE_IN_PROGRESS,
  ErrorCode.FENCED_INSTANCE_ID,
  ErrorCode.DEADLINE_EXCEEDED,
  ErrorCode.NO_TIMELY_ANSWER,
];

export function errorCodeFromWire(value: unknown): ErrorCode {
  const code = ERROR_CODE_BY_NUMBER[Number(value)];
  if (code === undefined) {
    throw new Error(`coordinator script returned an unknown error code ${String(value)}`);
  }
  return code;
}
